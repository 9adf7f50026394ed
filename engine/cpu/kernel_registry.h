// The CPU kernel table: op type -> factory that validates a kernel's tensors and
// attributes once and returns the prepared kernel. Each family file registers
// its ops (register_*_kernels), and CpuBackend assembles the table.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/runtime/attributes.h"
#include "engine/runtime/backend.h"

namespace piper::engine::cpu {

// A kernel's tensors and attributes with validation helpers whose errors name the op.
class KernelArgs {
 public:
  KernelArgs(const plan::Kernel& kernel, std::vector<TensorView> inputs,
             std::vector<TensorView> outputs);

  const std::string& op() const { return kernel_.op_type(); }
  // The plan's kernel: tensor indices identify this instruction within the plan.
  const plan::Kernel& kernel() const { return kernel_; }
  const Attributes& attributes() const { return attributes_; }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i].present(); }
  bool has_output(size_t i) const { return i < outputs_.size() && outputs_[i].present(); }
  // The i-th input/output; throws naming the op when it is omitted.
  const TensorView& input(size_t i) const;
  const TensorView& output(size_t i) const;

  // Throws unless the number of inputs (outputs) lies in [min, max].
  void expect_inputs(size_t min, size_t max) const;
  void expect_outputs(size_t min, size_t max) const;
  // Throws naming the tensor ("input 1") unless its dtype is `dtype`.
  void expect_dtype(const TensorView& view, plan::DType dtype, const std::string& what) const;
  // Throws naming both tensors unless their shapes are equal.
  void expect_same_shape(const TensorView& a, const std::string& a_what, const TensorView& b,
                         const std::string& b_what) const;
  // The operands of an elementwise gradient dX = f(dY, S) with S saved from the forward op
  // (named `saved` in errors): inputs dY and S, output dX, all float32 of one shape.
  void expect_saved_grad(const char* saved) const;
  // Throws unless the inputs broadcast (numpy rules) to exactly `output`'s shape.
  void expect_broadcast(const std::vector<TensorView>& inputs, const TensorView& output) const;
  // Output `output` as the float32 gradient of input `input` (equal shapes), or null when the
  // output is omitted; throws naming both otherwise.
  float* gradient_output(size_t output, size_t input) const;
  // `axis` (negative counts from the end) as an index into a shape of `rank`; throws when out
  // of range.
  int64_t normalize_axis(int64_t axis, int64_t rank) const;
  // A piper::Error "<op>: <message>".
  [[noreturn]] void fail(const std::string& message) const;

 private:
  const plan::Kernel& kernel_;
  Attributes attributes_;
  std::vector<TensorView> inputs_;
  std::vector<TensorView> outputs_;
};

using KernelFactory = std::function<std::unique_ptr<PreparedKernel>(const KernelArgs&)>;
using KernelTable = std::map<std::string, KernelFactory>;

// A prepared kernel from a closure over the precomputed state.
template <typename F>
std::unique_ptr<PreparedKernel> make_kernel(F body) {
  class Closure : public PreparedKernel {
   public:
    explicit Closure(F f) : f_(std::move(f)) {}
    void run(const StepContext& context) override { f_(context); }

   private:
    F f_;
  };
  return std::make_unique<Closure>(std::move(body));
}

void register_elementwise_kernels(KernelTable& table);    // elementwise.cc
void register_gemm_kernels(KernelTable& table);           // gemm.cc
void register_reduce_kernels(KernelTable& table);         // reduce.cc
void register_shape_kernels(KernelTable& table);          // shape_ops.cc
void register_loss_kernels(KernelTable& table);           // loss.cc
void register_optimizer_kernels(KernelTable& table);      // optimizers.cc
void register_data_parallel_kernels(KernelTable& table);  // data_parallel.cc
void register_indexing_kernels(KernelTable& table);       // indexing.cc
void register_nd_indexing_kernels(KernelTable& table);    // nd_indexing.cc
void register_non_zero_kernels(KernelTable& table);       // non_zero.cc
void register_layout_kernels(KernelTable& table);         // layout_ops.cc
void register_sequence_kernels(KernelTable& table);       // sequence_ops.cc
void register_einsum_kernels(KernelTable& table);         // einsum.cc
void register_nll_loss_kernels(KernelTable& table);       // nll_loss.cc

void register_math_kernels(KernelTable& table);           // math.cc
void register_activation_kernels(KernelTable& table);     // activation.cc
void register_normalization_kernels(KernelTable& table);  // normalization.cc
void register_logical_kernels(KernelTable& table);        // logical.cc
void register_dropout_kernels(KernelTable& table);        // dropout.cc
void register_hardmax_kernels(KernelTable& table);        // hardmax.cc

void register_fused_attention_kernels(KernelTable& table);  // fused_attention.cc
void register_fused_bias_gelu_kernels(KernelTable& table);  // fused_bias_gelu.cc

}  // namespace piper::engine::cpu
