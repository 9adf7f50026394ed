#include "engine/runtime/run.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "engine/runtime/data.h"
#include "engine/runtime/session.h"
#include "formats/error.h"
#include "formats/onnx_model.h"
#include "formats/plan_file.h"

namespace piper::engine {
namespace {

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

// Metrics as JSON lines in PATH.tmp, renamed to PATH by commit(); removed if never committed.
class MetricsFile {
 public:
  explicit MetricsFile(std::string path) : path_(std::move(path)), temporary_(path_ + ".tmp") {
    out_.open(temporary_, std::ios::trunc);
    if (!out_) {
      throw Error("--metrics: cannot write '" + temporary_ + "'");
    }
  }
  ~MetricsFile() {
    if (!committed_) {
      out_.close();
      std::error_code ignored;
      std::filesystem::remove(temporary_, ignored);
    }
  }
  void write(const nlohmann::json& line) {
    out_ << line.dump() << '\n';
    out_.flush();
    if (!out_) throw Error("--metrics: cannot write '" + temporary_ + "'");
  }
  void commit() {
    out_.close();
    std::error_code error;
    std::filesystem::rename(temporary_, path_, error);
    if (error) {
      throw Error("--metrics: cannot rename '" + temporary_ + "' to '" + path_ +
                  "': " + error.message());
    }
    committed_ = true;
  }

 private:
  std::string path_;
  std::string temporary_;
  std::ofstream out_;
  bool committed_ = false;
};

}  // namespace

void run_training(const RunOptions& options, std::ostream& out) {
  if (options.steps < 0) {
    throw Error("--steps must be at least 0, got " + std::to_string(options.steps));
  }
  plan::Plan plan = formats::read_plan_file(options.plan_path);
  std::unique_ptr<BatchSource> source = options.data_dir
                                            ? make_npy_source(plan, *options.data_dir)
                                            : make_synthetic_source(plan, options.seed);
  const int64_t global_batch = plan.global_batch();
  Session session(std::move(plan), make_backend(options.device), SessionOptions{options.seed});
  const plan::MemorySummary& memory = session.planned_memory();
  out << "plan " << options.plan_path << ": rank " << session.plan().header().rank() << " of "
      << std::max<uint32_t>(session.plan().header().world_size(), 1) << ", "
      << session.num_streams() << " streams, " << session.num_kernels() << " kernels, global batch "
      << global_batch << "; device " << session.backend().name() << ", " << source->describe()
      << "\n";
  out << "memory: arena " << mib(session.peak_bytes()) << " (planned: parameters "
      << mib(memory.parameter_bytes()) << ", gradients " << mib(memory.gradient_bytes())
      << ", optimizer " << mib(memory.optimizer_bytes()) << ", activations "
      << mib(memory.activation_bytes()) << ", inputs " << mib(memory.input_bytes()) << ")\n";

  std::optional<MetricsFile> metrics;
  if (options.metrics_path) metrics.emplace(*options.metrics_path);
  for (int64_t step = 0; step < options.steps; ++step) {
    const Batch batch = source->batch(step);
    const auto start = std::chrono::steady_clock::now();
    const double loss = session.step(batch);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double samples_per_s = seconds > 0 ? static_cast<double>(global_batch) / seconds : 0.0;
    char line[160];
    std::snprintf(line, sizeof line, "step %" PRId64 " loss %.6f (%.3f s, %.0f samples/s)",
                  step + 1, loss, seconds, samples_per_s);
    out << line << std::endl;
    if (metrics) {
      metrics->write({{"step", step + 1},
                      {"loss", loss},
                      {"seconds", seconds},
                      {"samples_per_s", samples_per_s},
                      {"peak_bytes", session.peak_bytes()}});
    }
  }
  if (options.save_onnx_path) {
    const onnx::ModelProto model = formats::load_onnx_model(session.plan().header().model_path());
    formats::save_onnx_with_initializers(model, session.trained_parameters(),
                                         *options.save_onnx_path);
    out << "saved the trained model to " << *options.save_onnx_path << "\n";
  }
  if (metrics) {
    metrics->commit();
    out << "wrote metrics to " << *options.metrics_path << "\n";
  }
}

}  // namespace piper::engine
