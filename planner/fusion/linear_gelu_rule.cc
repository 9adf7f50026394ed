// A Linear layer followed by GELU's tanh approximation,
//   piper.BiasGelu(piper.MatMul(X, W), Bias)   with approximate = "tanh",
// becomes one piper.MatMul(X, W, Bias) with activation = "gelu_tanh" (docs/plan-format.md): on
// CUDA one cuBLASLt product whose epilogue adds the bias and applies GELU
// (CUBLASLT_EPILOGUE_GELU_AUX_BIAS), with no pass over the product in between. cuBLASLt's GELU
// is the tanh approximation, so the exact (erf) GELU, PyTorch's default, stays piper.BiasGelu.
#include "planner/fusion/fusion.h"

namespace piper::planner {
namespace {

class LinearGeluRule : public FusionRule {
 public:
  std::string name() const override { return "fuse-linear-gelu"; }

  std::optional<Fusion> match(const PatternView& view, ir::OpId root) const override {
    const ir::Op& gelu = view.op(root);
    if (gelu.type != "piper.BiasGelu" ||
        ir::attr_string(gelu.attributes, "approximate", "none") != "tanh") {
      return std::nullopt;
    }
    const ir::OpId product = view.producer(gelu.inputs[0], "piper.MatMul");
    if (product < 0) return std::nullopt;
    const ir::Op& matmul = view.op(product);
    // The product's bias or GELU's goes to the epilogue; it adds one.
    const bool two_biases = matmul.inputs.size() == 3 && gelu.inputs.size() == 2;
    if (two_biases || ir::attr_int(matmul.attributes, "transA", 0) != 0) return std::nullopt;
    Fusion fusion;
    fusion.matched = {root, product};
    fusion.fused.type = "piper.MatMul";
    fusion.fused.inputs = matmul.inputs;
    if (gelu.inputs.size() == 2) fusion.fused.inputs.push_back(gelu.inputs[1]);
    fusion.fused.attributes = matmul.attributes;
    fusion.fused.attributes["activation"] = std::string("gelu_tanh");
    return fusion;
  }
};

}  // namespace

std::unique_ptr<FusionRule> make_linear_gelu_rule() { return std::make_unique<LinearGeluRule>(); }

}  // namespace piper::planner
