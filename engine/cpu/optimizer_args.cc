#include "engine/cpu/optimizer_args.h"

#include <string>

namespace piper::engine::cpu {

void check_optimizer_state(const KernelArgs& args, const std::vector<const char*>& names) {
  args.expect_outputs(0, 0);
  const TensorView& p = args.input(0);
  for (size_t i = 0; i < names.size(); ++i) {
    const TensorView& t = args.input(i);
    args.expect_dtype(t, plan::FLOAT32, names[i]);
    args.expect_same_shape(t, names[i], p, names[0]);
  }
}

const float* gradient_norm_input(const KernelArgs& args, size_t index) {
  if (args.num_inputs() != index + 1) return nullptr;
  const std::string what = "the gradient norm N (input " + std::to_string(index) + ")";
  const TensorView& norm = args.input(index);
  args.expect_dtype(norm, plan::FLOAT32, what);
  if (norm.elements() != 1) {
    args.fail(what + " must be a scalar, but has " + std::to_string(norm.elements()) + " elements");
  }
  return norm.as<const float>();
}

UpdateSchedule update_schedule(const KernelArgs& args, const float* norm) {
  const auto& attributes = args.attributes();
  UpdateSchedule update;
  update.lr = attributes.require_float("lr");
  update.schedule.type = attributes.get_string("lr_schedule", "constant");
  update.schedule.warmup_steps = attributes.get_int("warmup_steps", 0);
  update.schedule.total_steps = attributes.get_int("total_steps", 0);
  update.schedule.min_lr_ratio = attributes.get_float("min_lr_ratio", 0.0);
  if (const auto problem = formats::lr_schedule_problem(update.schedule)) {
    args.fail("attribute " +
              (problem->field == "type" ? std::string("lr_schedule") : problem->field) + ": " +
              problem->what);
  }
  const double max_norm = attributes.get_float("clip_grad_norm", 0.0);
  if (!(max_norm >= 0)) args.fail("attribute clip_grad_norm must be >= 0 (0: no clipping)");
  if (max_norm > 0 && norm == nullptr) {
    args.fail("attribute clip_grad_norm needs the global gradient norm N as the last input");
  }
  update.max_norm = static_cast<float>(max_norm);
  return update;
}

SquaredSlices squared_slices(const KernelArgs& args) {
  args.expect_outputs(1, 1);
  const std::vector<int64_t> starts = args.attributes().get_ints("starts", {});
  const std::vector<int64_t> counts = args.attributes().get_ints("counts", {});
  if (starts.size() != args.num_inputs() || counts.size() != args.num_inputs()) {
    args.fail("attributes starts and counts must hold one value per input (" +
              std::to_string(args.num_inputs()) + "), but hold " + std::to_string(starts.size()) +
              " and " + std::to_string(counts.size()));
  }
  SquaredSlices slices;
  for (size_t i = 0; i < args.num_inputs(); ++i) {
    const std::string what = "input " + std::to_string(i);
    const TensorView& x = args.input(i);
    args.expect_dtype(x, plan::FLOAT32, what);
    if (starts[i] < 0 || counts[i] < 0 || starts[i] > x.elements() ||
        counts[i] > x.elements() - starts[i]) {
      args.fail(what + ": elements [" + std::to_string(starts[i]) + ", +" +
                std::to_string(counts[i]) + ") lie outside its " + std::to_string(x.elements()));
    }
    slices.data.push_back(x.as<const float>() + starts[i]);
    slices.counts.push_back(counts[i]);
  }
  const TensorView& y = args.output(0);
  args.expect_dtype(y, plan::FLOAT32, "output 0");
  if (y.elements() != 1) args.fail("output 0 must be a scalar");
  slices.y = y.as<float>();
  return slices;
}

SgdSettings check_sgd(const KernelArgs& args) {
  args.expect_inputs(2, 4);
  const auto& attributes = args.attributes();
  SgdSettings sgd;
  sgd.momentum = attributes.get_float("momentum", 0.0);
  sgd.dampening = attributes.get_float("dampening", 0.0);
  sgd.weight_decay = attributes.get_float("weight_decay", 0.0);
  sgd.nesterov = attributes.get_int("nesterov", 0) != 0;
  if (sgd.nesterov && (sgd.momentum <= 0.0 || sgd.dampening != 0.0)) {
    args.fail("Nesterov momentum requires momentum > 0 and dampening = 0 (as torch.optim.SGD)");
  }
  if (sgd.momentum != 0.0) {
    check_optimizer_state(args, {"P (input 0)", "G (input 1)", "momentum buffer M (input 2)"});
    sgd.momentum_buffer = args.input(2).as<float>();
  } else {
    check_optimizer_state(args, {"P (input 0)", "G (input 1)"});
  }
  sgd.norm = gradient_norm_input(args, sgd.momentum != 0.0 ? 3 : 2);
  return sgd;
}

AdamWSettings check_adamw(const KernelArgs& args) {
  args.expect_inputs(4, 5);
  check_optimizer_state(args, {"P (input 0)", "G (input 1)", "M (input 2)", "V (input 3)"});
  const auto& attributes = args.attributes();
  AdamWSettings adamw;
  adamw.beta1 = attributes.get_float("beta1", 0.9);
  adamw.beta2 = attributes.get_float("beta2", 0.999);
  adamw.eps = attributes.get_float("eps", 1e-8);
  adamw.weight_decay = attributes.get_float("weight_decay", 1e-2);
  adamw.norm = gradient_norm_input(args, 4);
  return adamw;
}

}  // namespace piper::engine::cpu
