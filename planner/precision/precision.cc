#include "planner/precision/precision.h"

#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

namespace piper::planner {
namespace {

// A Cast the model wrote produces the dtype it names, whatever its input.
bool keeps_model_dtypes(const std::string& type) { return type == "Cast"; }

bool computes_in_bf16(const std::string& type) {
  static const std::set<std::string> types = {"MatMul", "piper.MatMul", "Gemm", "Einsum",
                                              "piper.FusedAttention"};
  return types.count(type) > 0;
}

bool computes_in_float32(const std::string& type) {
  static const std::set<std::string> types = {"LayerNormalization",
                                              "Softmax",
                                              "LogSoftmax",
                                              "SoftmaxCrossEntropyLoss",
                                              "NegativeLogLikelihoodLoss",
                                              "ReduceSum",
                                              "ReduceMean",
                                              "ReduceSumSquare",
                                              "ReduceL2",
                                              "ReduceLogSumExp",
                                              "ReduceLogSum",
                                              "ReduceL1",
                                              "ReduceProd",
                                              "Exp",
                                              "Log",
                                              "Pow",
                                              "Sqrt",
                                              "Reciprocal",
                                              "CumSum"};
  return types.count(type) > 0;
}

// Float outputs an op writes in float32 whatever it computes in: saved statistics.
bool keeps_float32_output(const ir::Op& op, size_t index) {
  return op.type == "piper.FusedAttention" && index > 0;
}

class CastInserter {
 public:
  explicit CastInserter(const ir::OpGraph& forward) : forward_(forward) {
    for (const ir::Tensor& tensor : forward.tensors()) result_.add_tensor(tensor);
  }

  ir::OpGraph run() {
    for (const ir::Op& original : forward_.ops()) {
      ir::Op op = original;
      if (!keeps_model_dtypes(op.type)) {
        const ir::DType dtype = compute_dtype(op);
        for (ir::TensorId& input : op.inputs) {
          if (needs_cast(input, dtype)) input = cast(input, dtype, op);
        }
        for (size_t i = 0; i < op.outputs.size(); ++i) {
          const ir::TensorId output = op.outputs[i];
          if (output >= 0 && ir::is_float(result_.tensor(output).dtype) &&
              !keeps_float32_output(op, i)) {
            result_.tensor(output).dtype = dtype;
          }
        }
      }
      result_.add_op(std::move(op));
    }
    result_.inputs = forward_.inputs;
    result_.loss = forward_.loss;
    if (result_.tensor(result_.loss).dtype == ir::DType::kBFloat16) {
      result_.loss =
          cast(result_.loss, ir::DType::kFloat32, result_.op(result_.producer(result_.loss)));
    }
    return std::move(result_);
  }

 private:
  ir::DType compute_dtype(const ir::Op& op) const {
    if (computes_in_bf16(op.type)) return ir::DType::kBFloat16;
    if (computes_in_float32(op.type)) return ir::DType::kFloat32;
    bool any_bf16 = false;
    for (ir::TensorId input : op.inputs) {
      if (input < 0 || !ir::is_per_microbatch(result_, input)) continue;
      const ir::DType dtype = result_.tensor(input).dtype;
      if (dtype == ir::DType::kFloat32) return dtype;
      any_bf16 = any_bf16 || dtype == ir::DType::kBFloat16;
    }
    return any_bf16 ? ir::DType::kBFloat16 : ir::DType::kFloat32;
  }

  bool needs_cast(ir::TensorId input, ir::DType dtype) const {
    if (input < 0) return false;
    const ir::Tensor& tensor = result_.tensor(input);
    if (!ir::is_float(tensor.dtype) || tensor.dtype == dtype) return false;
    const bool float32_scalar = tensor.role == ir::Role::kConstant &&
                                tensor.dtype == ir::DType::kFloat32 &&
                                ir::num_elements(tensor.shape) == 1;
    return !float32_scalar;
  }

  // `source` in `dtype`, cast once per reader tag tuple so that the cast joins the reader's
  // task (a parameter read by several layers gets a cast in each).
  ir::TensorId cast(ir::TensorId source, ir::DType dtype, const ir::Op& reader) {
    const auto key = std::make_tuple(source, dtype, reader.tags);
    const auto found = casts_.find(key);
    if (found != casts_.end()) return found->second;
    ir::Tensor tensor = result_.tensor(source);
    tensor.name += (dtype == ir::DType::kBFloat16 ? "/bf16" : "/f32") +
                   (reader.tags.empty() ? "" : ir::to_string(reader.tags));
    tensor.dtype = dtype;
    tensor.role = ir::Role::kActivation;
    tensor.initializer.clear();
    tensor.data.clear();
    tensor.accumulated = false;
    tensor.shard_of = -1;
    const ir::TensorId output = result_.add_tensor(std::move(tensor));
    ir::Op op;
    op.type = "Cast";
    op.name = result_.tensor(output).name;
    op.inputs = {source};
    op.outputs = {output};
    op.attributes["to"] = ir::onnx_data_type(dtype);
    op.tags = reader.tags;
    result_.add_op(std::move(op));
    casts_.emplace(key, output);
    return output;
  }

  const ir::OpGraph& forward_;
  ir::OpGraph result_;
  std::map<std::tuple<ir::TensorId, ir::DType, ir::Tags>, ir::TensorId> casts_;
};

bool is_matrix_product(const std::string& type) {
  static const std::set<std::string> types = {
      "MatMul", "piper.MatMul",         "Gemm",
      "Einsum", "piper.FusedAttention", "piper.FusedAttentionGrad"};
  return types.count(type) > 0;
}

}  // namespace

int insert_bf16_casts(ir::OpGraph& graph) {
  if (!graph.trained.empty() || graph.loss_seed >= 0) {
    throw std::logic_error("bf16 casts are inserted into the forward graph, before autodiff");
  }
  const int before = graph.num_ops();
  graph = CastInserter(graph).run();
  return graph.num_ops() - before;
}

bool sums_in_float32(const std::string& type) {
  return type == "MatMul" || type == "piper.MatMul" || type == "Gemm" || type == "Einsum" ||
         type == "piper.SumTo" || type == "piper.BiasGeluGrad";
}

void allow_tf32(ir::OpGraph& graph) {
  for (ir::OpId id = 0; id < graph.num_ops(); ++id) {
    ir::Op& op = graph.op(id);
    if (is_matrix_product(op.type)) op.attributes["tf32"] = int64_t{1};
  }
}

}  // namespace piper::planner
