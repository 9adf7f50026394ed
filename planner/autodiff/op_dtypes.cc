#include "planner/autodiff/op_dtypes.h"

#include <algorithm>

#include "formats/error.h"

namespace piper::planner {
namespace {

constexpr ir::DType F = ir::DType::kFloat32, I = ir::DType::kInt64, B = ir::DType::kBool;

OpDtypes input(std::vector<ir::DType> dtypes, size_t index = 0) {
  return {false, index, std::move(dtypes)};
}
OpDtypes output(std::vector<ir::DType> dtypes) { return {true, 0, std::move(dtypes)}; }

std::string dtype_name(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kFloat32:
      return "float32";
    case ir::DType::kInt64:
      return "int64";
    case ir::DType::kBool:
      return "bool";
    case ir::DType::kBFloat16:
      return "bfloat16";
  }
  return ir::to_string(dtype);
}

std::string dtype_list(const std::vector<ir::DType>& dtypes) {
  std::string text;
  for (const ir::DType dtype : dtypes) text += (text.empty() ? "" : ", ") + dtype_name(dtype);
  return text;
}

}  // namespace

// One op a line, sorted, so that additions merge.
const std::map<std::string, OpDtypes>& op_dtypes() {
  static const std::map<std::string, OpDtypes> kTable = {
      {"Abs", input({F, I})},
      {"Acos", input({F})},
      {"Acosh", input({F})},
      {"Add", input({F, I})},
      {"And", input({B})},
      {"ArgMax", input({F, I})},
      {"ArgMin", input({F, I})},
      {"Asin", input({F})},
      {"Asinh", input({F})},
      {"Atan", input({F})},
      {"Atanh", input({F})},
      {"Cast", input({F, I, B})},
      {"CastLike", input({F, I, B})},
      {"Ceil", input({F})},
      {"Celu", input({F})},
      {"Clip", input({F})},
      {"Concat", input({F, I, B})},
      {"ConstantOfShape", output({F, I, B})},
      {"Cos", input({F})},
      {"Cosh", input({F})},
      {"CumSum", input({F, I})},
      {"Div", input({F})},
      {"Dropout", input({F})},
      {"Einsum", input({F})},
      {"Elu", input({F})},
      {"Equal", input({F, I, B})},
      {"Erf", input({F})},
      {"Exp", input({F})},
      {"Expand", input({F, I, B})},
      {"Flatten", input({F, I, B})},
      {"Floor", input({F})},
      {"Gather", input({F, I, B})},
      {"GatherElements", input({F, I, B})},
      {"GatherND", input({F, I, B})},
      {"Gemm", input({F})},
      {"Greater", input({F, I})},
      {"GreaterOrEqual", input({F, I})},
      {"HardSigmoid", input({F})},
      {"HardSwish", input({F})},
      {"Hardmax", input({F})},
      {"Identity", input({F, I, B})},
      {"IsInf", input({F})},
      {"IsNaN", input({F})},
      {"LayerNormalization", input({F})},
      {"LeakyRelu", input({F})},
      {"Less", input({F, I})},
      {"LessOrEqual", input({F, I})},
      {"Log", input({F})},
      {"LogSoftmax", input({F})},
      {"MatMul", input({F})},
      {"Max", input({F, I})},
      {"Mean", input({F})},
      {"Min", input({F, I})},
      {"Mod", input({F, I})},
      {"Mul", input({F, I})},
      {"Neg", input({F, I})},
      {"NegativeLogLikelihoodLoss", input({F})},
      {"Not", input({B})},
      {"NonZero", input({F, I, B})},
      {"OneHot", output({F, I})},
      {"Or", input({B})},
      {"PRelu", input({F})},
      {"Pow", input({F, I})},
      {"Range", output({F, I})},
      {"Reciprocal", input({F})},
      {"ReduceL1", input({F, I})},
      {"ReduceL2", input({F})},
      {"ReduceLogSum", input({F})},
      {"ReduceLogSumExp", input({F})},
      {"ReduceMax", input({F, I})},
      {"ReduceMean", input({F})},
      {"ReduceMin", input({F, I})},
      {"ReduceProd", input({F, I})},
      {"ReduceSum", input({F, I})},
      {"ReduceSumSquare", input({F, I})},
      {"Relu", input({F})},
      {"Reshape", input({F, I, B})},
      {"Round", input({F})},
      {"ScatterElements", input({F, I, B})},
      {"ScatterND", input({F, I, B})},
      {"Selu", input({F})},
      {"Sigmoid", input({F})},
      {"Sign", input({F, I})},
      {"Sin", input({F})},
      {"Sinh", input({F})},
      {"Slice", input({F, I, B})},
      {"Softmax", input({F})},
      {"SoftmaxCrossEntropyLoss", input({F})},
      {"Softplus", input({F})},
      {"Softsign", input({F})},
      {"Split", input({F, I, B})},
      {"Sqrt", input({F})},
      {"Squeeze", input({F, I, B})},
      {"Sub", input({F, I})},
      {"Sum", input({F, I})},
      {"Tan", input({F})},
      {"Tanh", input({F})},
      {"ThresholdedRelu", input({F})},
      {"Tile", input({F, I, B})},
      {"TopK", input({F, I})},
      {"Transpose", input({F, I, B})},
      {"Trilu", input({F, I, B})},
      {"Unsqueeze", input({F, I, B})},
      {"Where", input({F, I, B}, 1)},
      {"Xor", input({B})},
  };
  return kTable;
}

void check_op_dtypes(const ir::OpGraph& graph, const std::string& model_name) {
  const auto& table = op_dtypes();
  for (const ir::Op& op : graph.ops()) {
    const auto entry = table.find(op.type);
    if (entry == table.end()) continue;  // check_supported_ops names it
    const OpDtypes& accepted = entry->second;
    const std::vector<ir::TensorId>& tensors = accepted.output ? op.outputs : op.inputs;
    if (accepted.index >= tensors.size() || tensors[accepted.index] < 0) continue;
    const ir::DType dtype = graph.tensor(tensors[accepted.index]).dtype;
    if (std::find(accepted.dtypes.begin(), accepted.dtypes.end(), dtype) != accepted.dtypes.end()) {
      continue;
    }
    throw Error(model_name + ": node '" + op.name + "' (" + op.type +
                "): " + (accepted.output ? "output " : "input ") + std::to_string(accepted.index) +
                " has dtype " + dtype_name(dtype) + ", which Piper's " + op.type +
                " does not take (it takes " + dtype_list(accepted.dtypes) +
                "); compute it in one of those, e.g. with a Cast before the op");
  }
}

}  // namespace piper::planner
