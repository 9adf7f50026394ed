#include "engine/cpu/kernel_registry.h"

#include "engine/cpu/strided_loop.h"
#include "formats/error.h"

namespace piper::engine::cpu {

KernelArgs::KernelArgs(const plan::Kernel& kernel, std::vector<TensorView> inputs,
                       std::vector<TensorView> outputs)
    : kernel_(kernel),
      attributes_(kernel),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)) {}

const TensorView& KernelArgs::input(size_t i) const {
  if (!has_input(i)) {
    fail("input " + std::to_string(i) + " is required but omitted");
  }
  return inputs_[i];
}

const TensorView& KernelArgs::output(size_t i) const {
  if (!has_output(i)) {
    fail("output " + std::to_string(i) + " is required but omitted");
  }
  return outputs_[i];
}

void KernelArgs::expect_inputs(size_t min, size_t max) const {
  if (inputs_.size() < min || inputs_.size() > max) {
    fail("takes " +
         (min == max ? std::to_string(min) : std::to_string(min) + " to " + std::to_string(max)) +
         " inputs, the plan gives " + std::to_string(inputs_.size()));
  }
}

void KernelArgs::expect_outputs(size_t min, size_t max) const {
  if (outputs_.size() < min || outputs_.size() > max) {
    fail("produces " +
         (min == max ? std::to_string(min) : std::to_string(min) + " to " + std::to_string(max)) +
         " outputs, the plan gives " + std::to_string(outputs_.size()));
  }
}

void KernelArgs::expect_dtype(const TensorView& view, plan::DType dtype,
                              const std::string& what) const {
  if (view.dtype != dtype) {
    fail(what + " has dtype " + dtype_name(view.dtype) + ", expected " + dtype_name(dtype));
  }
}

void KernelArgs::expect_saved_grad(const char* saved) const {
  expect_inputs(2, 2);
  expect_outputs(1, 1);
  const TensorView& dy = input(0);
  const TensorView& s = input(1);
  const TensorView& dx = output(0);
  const std::string saved_what = std::string(saved) + " (input 1)";
  expect_same_shape(dy, "dY (input 0)", dx, "dX (output 0)");
  expect_same_shape(s, saved_what, dx, "dX (output 0)");
  expect_dtype(dy, plan::FLOAT32, "dY (input 0)");
  expect_dtype(s, plan::FLOAT32, saved_what);
  expect_dtype(dx, plan::FLOAT32, "dX (output 0)");
}

void KernelArgs::expect_same_shape(const TensorView& a, const std::string& a_what,
                                   const TensorView& b, const std::string& b_what) const {
  if (a.shape != b.shape) {
    fail(a_what + " has shape " + shape_string(a.shape) + " but " + b_what + " has shape " +
         shape_string(b.shape) + "; they must be equal");
  }
}

void KernelArgs::expect_broadcast(const std::vector<TensorView>& inputs,
                                  const TensorView& output) const {
  Shape shape = inputs.at(0).shape;
  for (size_t i = 1; i < inputs.size(); ++i) {
    try {
      shape = broadcast_shapes(shape, inputs[i].shape);
    } catch (const Error& error) {
      fail(std::string("inputs do not broadcast: ") + error.what());
    }
  }
  if (shape != output.shape) {
    fail("inputs broadcast to " + shape_string(shape) + " but the output has shape " +
         shape_string(output.shape));
  }
}

float* KernelArgs::gradient_output(size_t output, size_t input) const {
  if (!has_output(output)) return nullptr;
  const std::string what = "output " + std::to_string(output);
  expect_dtype(outputs_[output], plan::FLOAT32, what);
  expect_same_shape(outputs_[output], what, this->input(input), "input " + std::to_string(input));
  return outputs_[output].as<float>();
}

int64_t KernelArgs::normalize_axis(int64_t axis, int64_t rank) const {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  }
  return a;
}

void KernelArgs::fail(const std::string& message) const { throw Error(op() + ": " + message); }

}  // namespace piper::engine::cpu
