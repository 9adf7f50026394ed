#include "engine/cpu/bias_gelu_operands.h"

#include <string>

namespace piper::engine::cpu {

GeluApproximation check_bias_gelu(const KernelArgs& args, const TensorView& x, size_t bias_input) {
  const std::string approximate = args.attributes().get_string("approximate", "none");
  if (approximate != "none" && approximate != "tanh") {
    args.fail("approximate is '" + approximate + "'; expected \"none\" or \"tanh\"");
  }
  args.expect_dtype(x, plan::FLOAT32, "X (input " + std::to_string(bias_input - 1) + ")");
  if (args.has_input(bias_input)) {
    const TensorView& bias = args.input(bias_input);
    const std::string what = "Bias (input " + std::to_string(bias_input) + ")";
    args.expect_dtype(bias, plan::FLOAT32, what);
    if (x.rank() == 0 || bias.shape != Shape{x.shape.back()}) {
      args.fail(what + " has shape " + shape_string(bias.shape) + "; expected one value per " +
                "element of X's last dimension (X " + shape_string(x.shape) + ")");
    }
  }
  return approximate == "tanh" ? GeluApproximation::kTanh : GeluApproximation::kErf;
}

}  // namespace piper::engine::cpu
