// ONNX Dropout (opset 13+: data, optional ratio and training_mode inputs; output and optional
// mask) and its gradient piper.DropoutGrad(dY, mask[, ratio[, training_mode]]).
//
// Masks are drawn from a counter-based generator (dropout_stream.h): an element keeps its value
// when hash(run seed, step, node, g) >= ratio, with the node's id and the element's index g in
// the whole tensor from the plan's DropoutKey, so that any layout of the same model and seed
// draws the same masks, and a new mask every step.
#include <cstring>

#include "engine/cpu/dropout_stream.h"
#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/op_checks.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

// The optional ratio and training_mode inputs, from input `ratio_input` on: scalars, float32
// and bool.
void check_dropout_mode(const KernelArgs& args, size_t ratio_input) {
  if (args.has_input(ratio_input)) {
    const TensorView& ratio = args.input(ratio_input);
    args.expect_dtype(ratio, plan::FLOAT32, "ratio (input " + std::to_string(ratio_input) + ")");
    if (ratio.elements() != 1) {
      args.fail("ratio must be a scalar, got shape " + shape_string(ratio.shape));
    }
  }
  if (args.has_input(ratio_input + 1)) {
    const TensorView& training = args.input(ratio_input + 1);
    const std::string what = "training_mode (input " + std::to_string(ratio_input + 1) + ")";
    args.expect_dtype(training, plan::BOOL, what);
    if (training.elements() != 1) {
      args.fail(what + " must be a scalar, got shape " + shape_string(training.shape));
    }
  }
}

std::unique_ptr<PreparedKernel> dropout_factory(const KernelArgs& args) {
  check_dropout(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  uint8_t* mask = args.has_output(1) ? args.output(1).as<uint8_t>() : nullptr;
  const dropout::Mode mode = dropout_mode(args, 1);
  const DropoutKeying keying = dropout_keying(args);
  return make_kernel([mode, keying, mask, n = x.elements(), px = x.as<const float>(),
                      py = y.as<float>()](const StepContext& context) {
    const float p = mode.probability();
    if (!mode.training() || p == 0.0f) {
      if (py != px) std::memcpy(py, px, static_cast<size_t>(n) * sizeof(float));
      if (mask != nullptr) std::memset(mask, 1, static_cast<size_t>(n));
      return;
    }
    if (p < 0.0f || p > 1.0f) {
      throw Error(dropout_ratio_error(p));
    }
    const float scale = mode.scale();
    const uint64_t key = dropout::step_key(context.seed, context.step, keying.node);
    const uint64_t threshold = dropout::threshold(p);
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = dropout::keeps(key, dropout::global_index(keying.box, i), threshold);
      py[i] = keep ? px[i] * scale : 0.0f;
      if (mask != nullptr) mask[i] = keep ? 1 : 0;
    }
  });
}

// dX = dY · mask · scale, with scale 1/(1 − ratio) in training mode and 1 otherwise.
std::unique_ptr<PreparedKernel> dropout_grad_factory(const KernelArgs& args) {
  check_dropout_grad(args);
  const TensorView& dy = args.input(0);
  const TensorView& mask = args.input(1);
  const TensorView& dx = args.output(0);
  const dropout::Mode mode = dropout_mode(args, 2);
  return make_kernel([mode, n = dx.elements(), pdy = dy.as<const float>(),
                      pmask = mask.as<const uint8_t>(), pdx = dx.as<float>()](const StepContext&) {
    const float scale = mode.scale();
    for (int64_t i = 0; i < n; ++i) pdx[i] = pmask[i] != 0 ? pdy[i] * scale : 0.0f;
  });
}

}  // namespace

void check_dropout(const KernelArgs& args) {
  args.expect_inputs(1, 3);
  args.expect_outputs(1, 2);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, plan::FLOAT32, "data (input 0)");
  args.expect_dtype(y, plan::FLOAT32, "output 0");
  args.expect_same_shape(x, "data (input 0)", y, "output 0");
  if (args.has_output(1)) {
    const TensorView& m = args.output(1);
    args.expect_dtype(m, plan::BOOL, "mask (output 1)");
    args.expect_same_shape(m, "mask (output 1)", x, "data (input 0)");
  }
  check_dropout_mode(args, 1);
}

DropoutKeying dropout_keying(const KernelArgs& args) {
  const plan::DropoutKey& key = args.kernel().dropout();
  DropoutKeying keying;
  // A plan written by hand (tests) may leave the key out: its output's tensor index tells its
  // Dropouts apart, and its tensors are whole.
  const uint64_t node =
      key.node() != 0 ? key.node() : static_cast<uint64_t>(args.kernel().outputs(0));
  keying.node = dropout::node_key(node, args.attributes().get_int("seed", 0));
  const Shape& local = args.input(0).shape;
  keying.box.inner = args.input(0).elements();
  if (key.whole_shape().empty()) return keying;
  const size_t rank = local.size();
  if (static_cast<size_t>(key.whole_shape_size()) != rank ||
      static_cast<size_t>(key.offset_size()) != rank) {
    args.fail("its dropout key's whole_shape and offset must have the data's rank " +
              std::to_string(rank));
  }
  // Fold the trailing dimensions the block holds whole; the rest are the box's.
  size_t outer = rank;
  keying.box.inner = 1;
  for (; outer > 0 && key.offset(outer - 1) == 0 && key.whole_shape(outer - 1) == local[outer - 1];
       --outer) {
    keying.box.inner *= local[outer - 1];
  }
  if (outer > dropout::kMaxBoxRank) {
    args.fail("its dropout block has " + std::to_string(outer) + " partial dimensions, at most " +
              std::to_string(dropout::kMaxBoxRank) + " are supported");
  }
  keying.box.rank = static_cast<int>(outer);
  for (size_t d = 0; d < outer; ++d) {
    if (key.offset(d) < 0 || key.offset(d) + local[d] > key.whole_shape(d)) {
      args.fail("its dropout block [" + std::to_string(key.offset(d)) + ", " +
                std::to_string(key.offset(d) + local[d]) + ") of dimension " + std::to_string(d) +
                " lies outside the whole tensor's " + std::to_string(key.whole_shape(d)));
    }
    keying.box.local[d] = local[d];
    keying.box.offset[d] = key.offset(d);
    keying.box.whole[d] = key.whole_shape(d);
  }
  return keying;
}

std::string dropout_ratio_error(float ratio) {
  return "Dropout: ratio " + std::to_string(ratio) + " is outside [0, 1]";
}

dropout::Mode dropout_mode(const KernelArgs& args, size_t ratio_input) {
  dropout::Mode mode;
  if (args.has_input(ratio_input)) mode.ratio = args.input(ratio_input).as<const float>();
  if (args.has_input(ratio_input + 1)) {
    mode.training_mode = args.input(ratio_input + 1).as<const uint8_t>();
  }
  return mode;
}

void check_dropout_grad(const KernelArgs& args) {
  args.expect_inputs(2, 4);
  args.expect_outputs(1, 1);
  const TensorView& dy = args.input(0);
  const TensorView& mask = args.input(1);
  const TensorView& dx = args.output(0);
  args.expect_dtype(dy, plan::FLOAT32, "dY (input 0)");
  args.expect_dtype(mask, plan::BOOL, "mask (input 1)");
  args.expect_dtype(dx, plan::FLOAT32, "dX (output 0)");
  args.expect_same_shape(dy, "dY (input 0)", dx, "dX (output 0)");
  args.expect_same_shape(mask, "mask (input 1)", dx, "dX (output 0)");
  check_dropout_mode(args, 2);
}

void register_dropout_kernels(KernelTable& table) {
  table["Dropout"] = dropout_factory;
  table["piper.DropoutGrad"] = dropout_grad_factory;
}

}  // namespace piper::engine::cpu
