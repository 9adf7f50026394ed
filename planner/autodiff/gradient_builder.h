// What a gradient rule sees while differentiating one forward op.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/ir/op_graph.h"

namespace piper::planner {

class GradientBuilder {
 public:
  // The forward op is copied: emitting ops and tensors moves the graph's storage.
  GradientBuilder(ir::OpGraph& graph, ir::OpId forward)
      : graph_(graph), forward_id_(forward), forward_(graph.op(forward)) {}

  const ir::Op& op() const { return forward_; }
  ir::Shape input_shape(size_t index) const { return graph_.tensor(op().inputs.at(index)).shape; }
  ir::Shape output_shape(size_t index) const { return graph_.tensor(op().outputs.at(index)).shape; }
  ir::Shape shape(ir::TensorId id) const { return graph_.tensor(id).shape; }
  ir::DType dtype(ir::TensorId id) const { return graph_.tensor(id).dtype; }
  bool has_input(size_t index) const {
    return index < op().inputs.size() && op().inputs[index] >= 0;
  }

  // The gradient flowing into output `index`, or -1 when none does.
  ir::TensorId output_gradient(size_t index) const { return output_gradients_.at(index); }
  // Whether the loss's gradient with respect to input `index` is wanted.
  bool wants(size_t index) const { return index < wanted_.size() && wanted_[index]; }

  // Adds a pass-B op with the forward op's tags producing one new float tensor of `shape`;
  // returns that tensor. Float outputs are bfloat16 when an input is (mixed precision keeps
  // each forward op's float inputs in one dtype, so its gradient ops compute in that dtype),
  // else float32.
  ir::TensorId emit(const std::string& type, std::vector<ir::TensorId> inputs,
                    const ir::Shape& shape, ir::Attributes attributes = {});
  // Like emit, for an op with several float outputs; an output whose shape is nullopt is
  // omitted (-1). Returns the outputs in order.
  std::vector<ir::TensorId> emit_multi(const std::string& type, std::vector<ir::TensorId> inputs,
                                       const std::vector<std::optional<ir::Shape>>& shapes,
                                       ir::Attributes attributes = {});
  // `tensor` cast to `dtype` by a pass-B Cast, or `tensor` itself when it has that dtype. A
  // bfloat16 matrix product or piper.SumTo that nothing else reads writes float32 instead: a
  // weight gradient is then summed in float32 and rounded once, whatever the batch split.
  ir::TensorId cast(ir::TensorId tensor, ir::DType dtype);
  // The forward op's output `index`, added (named "<op>/<stem>") when the model omitted it,
  // so that the forward kernel also writes what the backward needs (a mask, saved statistics).
  ir::TensorId ensure_output(size_t index, const std::string& stem, ir::DType dtype,
                             const ir::Shape& shape);
  // A planner constant (float32 scalar or int64 vector).
  ir::TensorId constant(float value);
  ir::TensorId constant(const std::vector<int64_t>& values);
  // `gradient` reduced over broadcast dimensions down to input `index`'s shape.
  // The values of an int64 planner constant (folded axes, shapes).
  std::vector<int64_t> constant_ints(ir::TensorId id) const;
  ir::TensorId sum_to_input(ir::TensorId gradient, size_t index);

  // Records `gradient` as a contribution to input `index`'s gradient.
  void contribute(size_t index, ir::TensorId gradient);

  // Set by the driver before the rule runs.
  std::vector<ir::TensorId> output_gradients_;
  std::vector<bool> wanted_;
  // Filled by the rule: input index -> contribution.
  std::vector<std::pair<size_t, ir::TensorId>> contributions_;

 private:
  std::string fresh_name(const std::string& stem);
  ir::DType float_dtype_of(const std::vector<ir::TensorId>& inputs) const;

  ir::OpGraph& graph_;
  ir::OpId forward_id_;
  ir::Op forward_;
  int emitted_ = 0;
};

}  // namespace piper::planner
