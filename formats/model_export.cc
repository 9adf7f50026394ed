#include "formats/model_export.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "formats/atomic_file.h"
#include "formats/checkpoint_reader.h"
#include "formats/error.h"
#include "formats/onnx_inference.h"
#include "formats/onnx_model.h"
#include "formats/safetensors.h"

namespace piper::formats {
namespace {

namespace fs = std::filesystem;

constexpr char kModelFile[] = "model.onnx";
constexpr char kStateDictFile[] = "model.safetensors";
constexpr char kInferenceFile[] = "inference.onnx";
constexpr char kOptimizerPrefix[] = "optim/";  // the optimizer state's names in a checkpoint

std::string step_folder_of(const std::string& checkpoint) {
  if (fs::exists(fs::path(checkpoint) / kCheckpointIndexFile)) return checkpoint;
  const auto steps = committed_checkpoint_steps(checkpoint);
  if (steps.empty()) {
    throw Error("'" + checkpoint + "' is neither a checkpoint step folder (it has no " +
                kCheckpointIndexFile +
                ") nor a checkpoint folder with a committed step (piper-run "
                "--checkpoint-dir writes one)");
  }
  return steps.rbegin()->second;
}

std::string model_path_of(const ExportOptions& options, const CheckpointIndex& index,
                          const std::string& folder) {
  if (!options.model.empty()) return options.model;
  if (index.model_path.empty()) {
    throw Error("checkpoint '" + folder + "' does not record its model (its " +
                kCheckpointIndexFile +
                " predates that) and no --model was given: pass --model, the ONNX file the "
                "plan was made from");
  }
  if (!fs::exists(index.model_path)) {
    throw Error("checkpoint '" + folder + "' was trained from model '" + index.model_path +
                "', which no longer exists; pass --model, the ONNX file the plan was made from");
  }
  return index.model_path;
}

// A folder piper-export may write into: new, empty, or holding only its own files.
void prepare_out(const std::string& out) {
  std::error_code error;
  if (fs::exists(out, error)) {
    if (!fs::is_directory(out, error)) throw Error("-o '" + out + "' is a file, not a folder");
    std::vector<std::string> foreign;
    for (const auto& entry : fs::directory_iterator(out)) {
      const std::string name = entry.path().filename().string();
      if (name != kModelFile && name != kStateDictFile && name != kInferenceFile) {
        foreign.push_back(name);
      }
    }
    if (!foreign.empty()) {
      throw Error("-o '" + out + "' is not empty and not a folder piper-export wrote: it holds '" +
                  foreign.front() + "'" +
                  (foreign.size() > 1 ? " and " + std::to_string(foreign.size() - 1) + " more"
                                      : std::string()) +
                  "; export into a new or empty folder");
    }
  }
  fs::create_directories(out, error);
  if (error) throw Error("-o '" + out + "': cannot create it: " + error.message());
}

// bfloat16 values widened to float32 (exactly: bfloat16 is float32's upper half).
std::vector<uint8_t> widened_bf16(const std::vector<uint8_t>& bytes) {
  std::vector<uint8_t> wide(bytes.size() * 2);
  for (size_t i = 0; i < bytes.size() / 2; ++i) {
    uint16_t bits;
    std::memcpy(&bits, bytes.data() + 2 * i, 2);
    const uint32_t value = static_cast<uint32_t>(bits) << 16;
    std::memcpy(wide.data() + 4 * i, &value, 4);
  }
  return wide;
}

// Bytes of `dtype` (a safetensors dtype) as the initializer's type wants them: bfloat16
// master weights widen to float32.
std::vector<uint8_t> as_initializer_type(std::vector<uint8_t> bytes, const std::string& dtype,
                                         const onnx::TensorProto& initializer,
                                         const std::string& what) {
  const int type = initializer.data_type();
  if ((dtype == "F32" && type == onnx::TensorProto::FLOAT) ||
      (dtype == "I64" && type == onnx::TensorProto::INT64) ||
      (dtype == "BOOL" && type == onnx::TensorProto::BOOL) ||
      (dtype == "BF16" && type == onnx::TensorProto::BFLOAT16)) {
    return bytes;
  }
  if (dtype == "BF16" && type == onnx::TensorProto::FLOAT) return widened_bf16(bytes);
  throw Error(what + " is " + dtype + " in the checkpoint but ONNX type " + std::to_string(type) +
              " in the model; pass the --model the plan was made from");
}

std::vector<int64_t> dims_of(const onnx::TensorProto& tensor) {
  return {tensor.dims().begin(), tensor.dims().end()};
}

// The checkpoint's trained parameters, by initializer name, in the initializers' types.
std::map<std::string, std::vector<uint8_t>> trained_values(const CheckpointIndex& index,
                                                           const std::string& folder,
                                                           const onnx::ModelProto& model,
                                                           const std::string& model_path) {
  std::map<std::string, const onnx::TensorProto*> initializers;
  for (const auto& initializer : model.graph().initializer()) {
    initializers[initializer.name()] = &initializer;
  }
  CheckpointShardReader reader(folder);
  std::map<std::string, std::vector<uint8_t>> values;
  for (const auto& [name, saved] : index.tensors) {
    if (name.rfind(kOptimizerPrefix, 0) == 0) continue;
    const auto found = initializers.find(name);
    const std::string what = "checkpoint '" + folder + "' tensor '" + name + "'";
    if (found == initializers.end()) {
      throw Error(what + " is no initializer of '" + model_path +
                  "'; pass the --model the plan was made from");
    }
    if (dims_of(*found->second) != saved.shape) {
      throw Error(what + " has shape " + nlohmann::json(saved.shape).dump() + ", '" + model_path +
                  "' " + nlohmann::json(dims_of(*found->second)).dump() +
                  "; pass the --model the plan was made from");
    }
    const size_t element = safetensors_dtype_size(saved.dtype);
    const AssembledTensor whole = assemble_tensor(name, saved, element, reader);
    const TensorSlice all;
    std::vector<uint8_t> bytes =
        slice_of(whole, name, all, saved.shape, element, "the whole tensor, which the model has");
    values[name] = as_initializer_type(std::move(bytes), saved.dtype, *found->second, what);
  }
  return values;
}

// The state dict's dtype for an ONNX type: floating values as float32, others as they are.
std::string state_dict_dtype(const onnx::TensorProto& tensor) {
  switch (tensor.data_type()) {
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::BFLOAT16:
      return "F32";
    case onnx::TensorProto::INT64:
      return "I64";
    case onnx::TensorProto::INT32:
      return "I32";
    case onnx::TensorProto::BOOL:
      return "BOOL";
    case onnx::TensorProto::UINT8:
      return "U8";
    case onnx::TensorProto::INT8:
      return "I8";
    default:
      throw Error("initializer '" + tensor.name() + "' has ONNX type " +
                  std::to_string(tensor.data_type()) +
                  ", which piper-export writes no state dict entry for");
  }
}

std::vector<uint8_t> state_dict_bytes(const onnx::TensorProto& tensor) {
  std::vector<uint8_t> bytes = initializer_bytes(tensor);
  return tensor.data_type() == onnx::TensorProto::BFLOAT16 ? widened_bf16(bytes) : bytes;
}

std::map<std::string, std::string> tied_weights(const onnx::ModelProto& model,
                                                const std::string& model_path) {
  for (const auto& entry : model.metadata_props()) {
    if (entry.key() != kTiedWeightsKey) continue;
    try {
      return nlohmann::json::parse(entry.value()).get<std::map<std::string, std::string>>();
    } catch (const std::exception& error) {
      throw Error("'" + model_path + "' metadata '" + kTiedWeightsKey +
                  "' is not a JSON object of names: " + error.what());
    }
  }
  return {};
}

std::string stripped(const std::string& name, const std::string& prefix) {
  if (prefix.empty()) return name;
  if (name.rfind(prefix, 0) != 0) {
    throw Error("--prefix-strip '" + prefix + "': state dict name '" + name +
                "' does not start with it");
  }
  return name.substr(prefix.size());
}

// Every initializer (with do_constant_folding=False, torch.onnx.export names them as
// state_dict() does), then each tied alias with its initializer's value.
std::string state_dict(const onnx::ModelProto& trained, const std::string& model_path,
                       const std::string& prefix, ExportReport& report) {
  std::map<std::string, std::vector<uint8_t>> data;
  std::map<std::string, const onnx::TensorProto*> by_name;
  std::vector<SafetensorsEntry> entries;
  for (const auto& initializer : trained.graph().initializer()) {
    data[initializer.name()] = state_dict_bytes(initializer);
    by_name[initializer.name()] = &initializer;
  }
  auto add = [&](const std::string& name, const onnx::TensorProto& tensor) {
    const std::vector<uint8_t>& bytes = data.at(tensor.name());
    entries.push_back(
        {stripped(name, prefix), state_dict_dtype(tensor), dims_of(tensor),
         std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())});
  };
  for (const auto& [name, tensor] : by_name) add(name, *tensor);
  for (const auto& [alias, target] : tied_weights(trained, model_path)) {
    const auto found = by_name.find(target);
    if (found == by_name.end() || by_name.count(alias)) {
      throw Error(
          "'" + model_path + "' metadata '" + kTiedWeightsKey + "': '" + alias + "' is tied to '" +
          target + "', " +
          (by_name.count(alias) ? "but has an initializer of its own" : "which is no initializer"));
    }
    add(alias, *found->second);
    ++report.aliases;
  }
  report.state_dict_names = entries.size();
  return safetensors_bytes(entries, {{"format", "pt"}});
}

std::set<std::string> names_of(const std::map<std::string, std::vector<uint8_t>>& values) {
  std::set<std::string> names;
  for (const auto& [name, value] : values) names.insert(name);
  return names;
}

}  // namespace

ExportReport export_checkpoint(const ExportOptions& options) {
  ExportReport report;
  report.step_folder = step_folder_of(options.checkpoint);
  const CheckpointIndex index = read_checkpoint_index(report.step_folder);
  report.model_path = model_path_of(options, index, report.step_folder);
  const onnx::ModelProto model = load_onnx_model(report.model_path);
  const auto values = trained_values(index, report.step_folder, model, report.model_path);
  const fs::path out(options.out);
  const std::string model_file = (out / kModelFile).string();
  const onnx::ModelProto trained =
      with_initializers(model, values, ExternalData(model, report.model_path), model_file);
  const std::string weights = state_dict(trained, report.model_path, options.prefix_strip, report);
  onnx::ModelProto inference;
  if (options.inference) {
    inference = inference_model(trained, names_of(values), options.output, report.model_path);
  }
  // Everything is checked before the first file is written.
  prepare_out(options.out);
  save_onnx_model(trained, model_file);
  report.written.push_back(model_file);
  report.written.push_back((out / kStateDictFile).string());
  write_file_atomically(report.written.back(), weights);
  const std::string inference_file = (out / kInferenceFile).string();
  if (options.inference) {
    save_onnx_model(inference, inference_file);
    report.written.push_back(inference_file);
  } else {
    // An earlier export's, of other weights: a folder holds one export.
    std::error_code ignored;
    fs::remove(inference_file, ignored);
  }
  return report;
}

}  // namespace piper::formats
