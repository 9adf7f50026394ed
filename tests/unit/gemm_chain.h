// A chain of Gemm layers ending in a loss, for planner tests that need stages of known cost,
// one matrix product each: DualPipe's table, the 1F1B and ZB-H1 bubbles, "stages": "auto".
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "formats/strategy.h"
#include "onnx_builder.h"
#include "planner/plan_model.h"

namespace piper::testing {

// The model, in a temporary ONNX file that lives as long as the object. Inputs x [batch,
// widths[0]] and int64 labels y [batch]; layer l is node /fc<l>/Gemm, h_l = h_{l-1} · w_lᵀ with
// w_l [widths[l+1], widths[l]]; then node /loss, SoftmaxCrossEntropyLoss of the last layer's
// output. With `input_bias`, x + bias (node /fc0/Add) comes first, so that layer 0 computes its
// input's gradient (the bias's) as every later layer does.
class GemmChain {
 public:
  GemmChain(const std::vector<int64_t>& widths, bool input_bias) : layers_(widths.size() - 1) {
    OnnxBuilder b;
    b.input("x", {-1, widths.front()})
        .input("y", {-1}, onnx::TensorProto::INT64)
        .output("loss", {});
    std::string previous = "x";
    if (input_bias) {
      b.initializer("bias", {widths.front()}, std::vector<float>(widths.front(), 0.1f));
      b.node("Add", {"x", "bias"}, {"h"}, "/fc0/Add");
      previous = "h";
    }
    for (int layer = 0; layer < layers_; ++layer) {
      const std::string w = "w" + std::to_string(layer);
      b.initializer(w, {widths[layer + 1], widths[layer]},
                    std::vector<float>(widths[layer + 1] * widths[layer], 0.01f));
      const std::string out = "h" + std::to_string(layer);
      OnnxBuilder::attr(
          b.node("Gemm", {previous, w}, {out}, "/fc" + std::to_string(layer) + "/Gemm"), "transB",
          int64_t{1});
      previous = out;
    }
    b.node("SoftmaxCrossEntropyLoss", {previous, "y"}, {"loss"}, "/loss");
    static int written = 0;
    path_ = (std::filesystem::temp_directory_path() /
             ("piper_gemm_chain_" + std::to_string(::getpid()) + "_" + std::to_string(written++) +
              ".onnx"))
                .string();
    std::ofstream(path_, std::ios::binary) << b.model().SerializeAsString();
  }
  ~GemmChain() { std::filesystem::remove(path_); }
  GemmChain(const GemmChain&) = delete;
  GemmChain& operator=(const GemmChain&) = delete;

  const std::string& path() const { return path_; }
  int layers() const { return layers_; }

 private:
  int layers_;
  std::string path_;
};

// FLOP-bound kernels and free links: the pipeline's own bubble, no transfer time in it.
inline planner::PlanningOptions flop_bound() {
  planner::PlanningOptions options;
  options.rates.memory_bandwidth = 1e18;
  options.rates.op_overhead = 0;
  options.rates.intra_node = {.bandwidth = 1e18, .latency = 0};
  options.rates.inter_node = options.rates.intra_node;
  return options;
}

// The plans of `chain` with layer l as stage l (tag PP), under the `pipeline` generator's
// `schedule` on devices 0 .. devices-1, `microbatches` of `rows` rows each, at `options`' rates,
// the generator given `generator_keys` as well (e.g. `, "zero": 2`).
inline std::vector<plan::Plan> plan_stage_per_layer(
    const GemmChain& chain, const std::string& schedule, int devices, int microbatches,
    int64_t rows, const planner::PlanningOptions& options = flop_bound(),
    const std::string& generator_keys = "") {
  std::string annotations, device_list;
  for (int s = 0; s < chain.layers(); ++s) {
    annotations += std::string(s ? ", " : "") + R"({"match": "/fc)" + std::to_string(s) +
                   R"(/*", "tags": {"PP": )" + std::to_string(s) + "}}";
  }
  for (int d = 0; d < devices; ++d) device_list += (d ? ", " : "") + std::to_string(d);
  const std::string text = R"({"batch": {"global": )" + std::to_string(rows * microbatches) +
                           R"(}, "annotations": [)" + annotations +
                           R"(], "directives": [{"op": "pipeline", "schedule": ")" + schedule +
                           R"(", "devices": [)" + device_list + R"(], "num_microbatches": )" +
                           std::to_string(microbatches) + generator_keys + "}]}";
  return planner::plan_model(chain.path(), strategy::parse_strategy(text, "gemm_chain.json"),
                             options)
      .plans;
}

}  // namespace piper::testing
