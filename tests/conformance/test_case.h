// One ONNX backend node test: its model and its data sets, with tensors decoded
// into host buffers of Piper's dtypes. Loading never throws for a case Piper
// cannot represent; it records why instead (`unsupported`).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/tensor.h"
#include "schemas/plan.pb.h"

namespace piper::conformance {

// A tensor in host memory: little-endian, C order, `bytes.size()` == elements * dtype size.
struct HostTensor {
  plan::DType dtype = plan::DTYPE_UNSPECIFIED;
  engine::Shape shape;
  std::vector<uint8_t> bytes;
};

// Piper's dtype for an ONNX TensorProto data type, or nullopt when Piper has none.
std::optional<plan::DType> piper_dtype(int32_t onnx_type);
// "FLOAT16", "DOUBLE", ...: the ONNX name of a data type.
std::string onnx_type_name(int32_t onnx_type);

// Decodes a TensorProto. Throws piper::Error when its dtype has no Piper equivalent or its
// data does not match its shape.
HostTensor decode_tensor(const onnx::TensorProto& tensor);

struct ValueType {
  plan::DType dtype = plan::DTYPE_UNSPECIFIED;
  engine::Shape shape;
};

struct DataSet {
  std::string name;                      // "test_data_set_0"
  std::vector<HostTensor> inputs;        // input_K.pb, K = 0, 1, ...
  std::vector<HostTensor> outputs;       // output_K.pb
  std::vector<std::string> input_names;  // TensorProto names (may be empty)
  std::vector<std::string> output_names;
  // Dtype and shape of each value a node produces that is not a graph output (multi-node
  // models), from ONNX shape inference given this data set's input shapes.
  std::map<std::string, ValueType> intermediates;
};

struct TestCase {
  std::string name;  // the directory name, "test_add_bcast"
  std::string dir;
  onnx::ModelProto model;
  std::vector<DataSet> data_sets;
  // Why Piper cannot run this case as given (a dtype, a non-tensor type); empty when it can.
  std::string unsupported;
};

// Loads `dir` (model.onnx and test_data_set_*/). Throws piper::Error when files are missing
// or malformed; a case Piper cannot represent loads with `unsupported` set.
TestCase load_test_case(const std::string& dir);

// Whether `node` is folded into a constant, so that the runner computes it on the host
// instead of dispatching a kernel: a Constant, Shape or Size node whose output is not a
// graph output. Their values follow from attributes and static shapes, which a plan always
// has (the planner folds Constant and Shape nodes the same way).
bool folded_on_host(const onnx::NodeProto& node, const onnx::GraphProto& graph);

// The int64 value of a Shape node (opset 15 `start`/`end`: negative from the end, clamped
// to the rank) or a Size node whose input has shape `input`.
HostTensor shape_node_value(const onnx::NodeProto& node, const engine::Shape& input);

// The graph inputs the data sets feed, in order: graph inputs that are not initializers.
std::vector<const onnx::ValueInfoProto*> fed_inputs(const onnx::ModelProto& model);

// The case directories under `root` (those holding a model.onnx), sorted by name.
std::vector<std::string> list_test_cases(const std::string& root);

}  // namespace piper::conformance
