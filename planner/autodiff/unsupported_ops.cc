#include "planner/autodiff/unsupported_ops.h"

#include <map>
#include <set>

namespace piper::planner {
namespace {

// ONNX ops that real exports reach for and that Piper plans to implement (issue 13).
const std::set<std::string>& planned_ops() {
  static const std::set<std::string> kPlanned = {
      "Acos",
      "Acosh",
      "And",
      "Asin",
      "Asinh",
      "Atan",
      "Atanh",
      "CastLike",
      "Ceil",
      "Cos",
      "Cosh",
      "Floor",
      "GatherND",
      "GreaterOrEqual",
      "Hardmax",
      "IsInf",
      "IsNaN",
      "LessOrEqual",
      "Mean",
      "Mod",
      "Not",
      "Or",
      "ReduceL1",
      "ReduceL2",
      "ReduceLogSum",
      "ReduceLogSumExp",
      "ReduceMin",
      "ReduceProd",
      "ReduceSumSquare",
      "Round",
      "ScatterElements",
      "ScatterND",
      "Sign",
      "Sin",
      "Sinh",
      "Softsign",
      "Tan",
      "ThresholdedRelu",
      "Tile",
      "Xor",
  };
  return kPlanned;
}

const std::map<std::string, std::string>& export_advice() {
  static const std::string kControlFlow =
      "data-dependent control flow; export a forward() without Python loops or branches on "
      "tensor values (unroll loops over a fixed count)";
  static const std::string kSequence =
      "an ONNX sequence (a Python list of tensors); build the result with torch.stack or "
      "torch.cat instead of a list";
  static const std::string kQuantized =
      "a quantized op; export the float model, before quantization";
  static const std::string kRandom =
      "random values drawn inside forward(); pass them in as a model input, or use "
      "torch.nn.Dropout, which Piper supports";
  static const std::map<std::string, std::string> kAdvice = {
      {"Loop", kControlFlow},
      {"If", kControlFlow},
      {"Scan", kControlFlow},
      {"SequenceConstruct", kSequence},
      {"SequenceAt", kSequence},
      {"SequenceInsert", kSequence},
      {"SequenceEmpty", kSequence},
      {"SplitToSequence", kSequence},
      {"ConcatFromSequence", kSequence},
      {"QuantizeLinear", kQuantized},
      {"DequantizeLinear", kQuantized},
      {"DynamicQuantizeLinear", kQuantized},
      {"QLinearMatMul", kQuantized},
      {"QLinearConv", kQuantized},
      {"MatMulInteger", kQuantized},
      {"ConvInteger", kQuantized},
      {"RandomNormal", kRandom},
      {"RandomUniform", kRandom},
      {"RandomNormalLike", kRandom},
      {"RandomUniformLike", kRandom},
      {"Bernoulli", kRandom},
      {"Multinomial", kRandom},
  };
  return kAdvice;
}

}  // namespace

std::string unsupported_op_advice(const std::string& type) {
  if (planned_ops().count(type)) return "not yet supported; Piper plans to add it";
  if (const auto advice = export_advice().find(type); advice != export_advice().end()) {
    return advice->second;
  }
  if (type.find('.') != std::string::npos) {
    return "an op outside the ONNX domain; export with torch.onnx.export's default "
           "operator_export_type (OperatorExportTypes.ONNX) and without runtime-specific "
           "fusions";
  }
  return "not supported; rewrite that part of the model with supported ops";
}

}  // namespace piper::planner
