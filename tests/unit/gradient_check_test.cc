// Every gradient rule against central finite differences: the planner
// differentiates a one-op model, the CPU engine runs it, and the loss is
// re-evaluated with each parameter element nudged both ways.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>

#include "engine/runtime/session.h"
#include "formats/atomic_file.h"
#include "onnx_builder.h"
#include "planner/plan_model.h"

namespace piper {
namespace {

using testing::OnnxBuilder;

struct GradientCase {
  std::string name;
  // Adds trainable initializers and nodes computing "out" of shape `out_shape`.
  std::function<void(OnnxBuilder&)> build;
  std::vector<int64_t> out_shape;
  std::vector<std::string> parameters;
  bool out_is_loss = false;  // "out" is already the scalar loss
  // An op type the plan must run: the fused op the pattern built by `build` becomes.
  std::string fused_op = "";
};

std::vector<float> random_values(int64_t count, uint32_t seed, float low = -1, float high = 1,
                                 float away_from_zero = 0) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(count);
  for (float& v : values) {
    do v = uniform(generator);
    while (std::abs(v) < away_from_zero);
  }
  return values;
}

int64_t count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Adds a trainable initializer with random values.
void param(OnnxBuilder& b, const std::string& name, std::vector<int64_t> shape, uint32_t seed,
           float low = -1, float high = 1, float away_from_zero = 0) {
  b.initializer(name, shape, random_values(count(shape), seed, low, high, away_from_zero));
}

void PrintTo(const GradientCase& c, std::ostream* out) { *out << c.name; }

class GradientCheck : public ::testing::TestWithParam<GradientCase> {};

TEST_P(GradientCheck, MatchesCentralDifferences) {
  const GradientCase& c = GetParam();
  OnnxBuilder b;
  c.build(b);
  if (c.out_is_loss) {
    b.output("out", {});
  } else {
    // loss = sum(out * r) with a fixed random r, so every output element matters.
    b.initializer("r", c.out_shape, random_values(count(c.out_shape), 99));
    b.node("Mul", {"out", "r"}, {"weighted"});
    auto& sum = b.node("ReduceSum", {"weighted"}, {"loss"});
    OnnxBuilder::attr(sum, "keepdims", int64_t{0});
    b.output("loss", {});
  }
  // Per process, so that two test runs at once do not share files.
  const auto dir = std::filesystem::temp_directory_path() /
                   ("piper_gradcheck_" + c.name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string model_path = (dir / "model.onnx").string();
  formats::write_file_atomically(model_path, b.model().SerializeAsString());

  strategy::Strategy strategy;
  strategy.source = "gradient_check";
  strategy.global_batch = 1;
  strategy.optimizer.lr = 0;  // the step leaves parameters as they are
  strategy.frozen = {"r"};
  auto planned = planner::plan_model(model_path, strategy);
  if (!c.fused_op.empty()) {
    bool runs = false;
    for (const auto& stream : planned.plans.at(0).streams()) {
      for (const auto& instruction : stream.instructions()) {
        runs = runs || instruction.kernel().op_type() == c.fused_op;
      }
    }
    ASSERT_TRUE(runs) << c.name << ": the plan does not run " << c.fused_op;
  }
  engine::Session session(planned.plans.at(0), engine::make_backend("cpu"));

  const double loss = session.step({});
  ASSERT_TRUE(std::isfinite(loss));
  const float eps = 1e-2f;
  for (const std::string& name : c.parameters) {
    const std::vector<float> gradient = session.read_floats("grad/" + name);
    std::vector<float> values = session.read_floats(name);
    ASSERT_EQ(gradient.size(), values.size()) << name;
    double worst = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const float original = values[i];
      auto loss_at = [&](float value) {
        values[i] = value;
        session.write_tensor(name, values.data(), values.size() * sizeof(float));
        return session.step({});
      };
      const double numeric = (loss_at(original + eps) - loss_at(original - eps)) / (2 * eps);
      loss_at(original);
      values[i] = original;
      const double error = std::abs(numeric - gradient[i]) / std::max(1.0, std::abs(numeric));
      worst = std::max(worst, error);
      EXPECT_LT(error, 1e-2) << c.name << ": d loss / d " << name << "[" << i << "]: analytic "
                             << gradient[i] << ", numeric " << numeric;
    }
    std::printf("%s: %s worst relative error %.2e\n", c.name.c_str(), name.c_str(), worst);
  }
  std::filesystem::remove_all(dir);
}

onnx::NodeProto& node(OnnxBuilder& b, const std::string& op, std::vector<std::string> in) {
  return b.node(op, std::move(in), {"out"});
}

void string_attr(onnx::NodeProto& n, const std::string& name, const std::string& value) {
  auto* attr = n.add_attribute();
  attr->set_name(name);
  attr->set_type(onnx::AttributeProto::STRING);
  attr->set_s(value);
}

void add_indexing_and_layout_cases(std::vector<GradientCase>& all) {
  all.push_back({"Gather_repeated_indices",
                 [](OnnxBuilder& b) {
                   param(b, "a", {5, 3}, 30);
                   b.int_initializer("idx", {2, 3}, {1, 4, 1, 0, -1, 1});
                   node(b, "Gather", {"a", "idx"});
                 },
                 {2, 3, 3},
                 {"a"}});
  all.push_back({"Gather_inner_axis",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 4, 3}, 31);
                   b.int_initializer("idx", {3}, {3, 0, 3});
                   OnnxBuilder::attr(node(b, "Gather", {"a", "idx"}), "axis", int64_t{-2});
                 },
                 {2, 3, 3},
                 {"a"}});
  all.push_back({"GatherElements",
                 [](OnnxBuilder& b) {
                   param(b, "a", {3, 4}, 32);
                   b.int_initializer("idx", {3, 2}, {0, 3, 1, 1, -1, 2});
                   OnnxBuilder::attr(node(b, "GatherElements", {"a", "idx"}), "axis", int64_t{1});
                 },
                 {3, 2},
                 {"a"}});
  all.push_back({"Concat",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3}, 33);
                   param(b, "w", {2, 1}, 34);
                   OnnxBuilder::attr(node(b, "Concat", {"a", "w"}), "axis", int64_t{-1});
                 },
                 {2, 4},
                 {"a", "w"}});
  all.push_back(
      {"Split_one_output_used",
       [](OnnxBuilder& b) {
         param(b, "a", {2, 5}, 35);
         b.int_initializer("split", {2}, {2, 3});
         OnnxBuilder::attr(b.node("Split", {"a", "split"}, {"s0", "s1"}), "axis", int64_t{1});
         node(b, "Identity", {"s1"});
       },
       {2, 3},
       {"a"}});
  all.push_back({"Split_both_outputs",
                 [](OnnxBuilder& b) {
                   param(b, "a", {4, 3}, 36);
                   b.int_initializer("split", {2}, {1, 3});
                   b.node("Split", {"a", "split"}, {"s0", "s1"});
                   node(b, "Add", {"s0", "s1"});
                 },
                 {3, 3},
                 {"a"}});
  all.push_back({"Slice_negative_step",
                 [](OnnxBuilder& b) {
                   param(b, "a", {4, 5}, 37);
                   b.int_initializer("starts", {2}, {-1, 1});
                   b.int_initializer("ends", {2}, {-1000, 5});
                   b.int_initializer("axes", {2}, {0, -1});
                   b.int_initializer("steps", {2}, {-2, 2});
                   node(b, "Slice", {"a", "starts", "ends", "axes", "steps"});
                 },
                 {2, 2},
                 {"a"}});
  all.push_back({"Expand",
                 [](OnnxBuilder& b) {
                   param(b, "a", {3, 1}, 38);
                   b.int_initializer("shape", {3}, {2, 1, 4});
                   node(b, "Expand", {"a", "shape"});
                 },
                 {2, 3, 4},
                 {"a"}});
  all.push_back({"Where_broadcast",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3}, 39);
                   param(b, "w", {3}, 40);
                   b.int_initializer("ci", {2, 3}, {1, 0, 0, 1, 1, 0});
                   b.int_initializer("zero", {}, {0});
                   b.node("Greater", {"ci", "zero"}, {"cond"});
                   node(b, "Where", {"cond", "a", "w"});
                 },
                 {2, 3},
                 {"a", "w"}});
  all.push_back({"Trilu_lower_k",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3, 4}, 41);
                   b.int_initializer("k", {}, {1});
                   OnnxBuilder::attr(node(b, "Trilu", {"a", "k"}), "upper", int64_t{0});
                 },
                 {2, 3, 4},
                 {"a"}});
  for (int64_t exclusive : {0, 1}) {
    for (int64_t reverse : {0, 1}) {
      all.push_back(
          {"CumSum_exclusive" + std::to_string(exclusive) + "_reverse" + std::to_string(reverse),
           [=](OnnxBuilder& b) {
             param(b, "a", {2, 4}, 42);
             b.int_initializer("axis", {}, {1});
             auto& n = node(b, "CumSum", {"a", "axis"});
             OnnxBuilder::attr(n, "exclusive", exclusive);
             OnnxBuilder::attr(n, "reverse", reverse);
           },
           {2, 4},
           {"a"}});
    }
  }
  all.push_back({"TopK_values",
                 [](OnnxBuilder& b) {
                   // Well separated values, so a nudge of 1e-2 never changes the selection.
                   b.initializer("a", {3, 4},
                                 {0.1f, 0.9f, -0.5f, 0.4f, -0.2f, -0.8f, 0.7f, 0.3f, 0.6f, -0.4f,
                                  0.2f, -0.9f});
                   b.int_initializer("k", {1}, {2});
                   b.node("TopK", {"a", "k"}, {"out", "indices"});
                 },
                 {3, 2},
                 {"a"}});
  all.push_back({"TopK_smallest_axis0",
                 [](OnnxBuilder& b) {
                   b.initializer("a", {3, 2}, {0.5f, -0.3f, -0.7f, 0.8f, 0.1f, 0.2f});
                   b.int_initializer("k", {1}, {2});
                   auto& n = b.node("TopK", {"a", "k"}, {"out", "indices"});
                   OnnxBuilder::attr(n, "axis", int64_t{0});
                   OnnxBuilder::attr(n, "largest", int64_t{0});
                 },
                 {2, 2},
                 {"a"}});
  // ArgMax and OneHot carry no gradient; the mask they build multiplies a parameter.
  all.push_back({"ArgMax_OneHot_mask",
                 [](OnnxBuilder& b) {
                   b.initializer("a", {3, 4},
                                 {0.1f, 0.9f, -0.5f, 0.4f, -0.2f, -0.8f, 0.7f, 0.3f, 0.6f, -0.4f,
                                  0.2f, -0.9f});
                   auto& arg = b.node("ArgMax", {"a"}, {"arg"});
                   OnnxBuilder::attr(arg, "axis", int64_t{1});
                   OnnxBuilder::attr(arg, "keepdims", int64_t{0});
                   b.int_initializer("depth", {}, {4});
                   b.float_constant("values", {2}, {0.5f, 2.0f});
                   b.node("OneHot", {"arg", "depth", "values"}, {"mask"});
                   node(b, "Mul", {"a", "mask"});
                 },
                 {3, 4},
                 {"a"}});
  for (const char* reduction : {"mean", "sum", "none"}) {
    all.push_back(
        {std::string("NegativeLogLikelihoodLoss_") + reduction,
         [=](OnnxBuilder& b) {
           param(b, "input", {4, 5}, 43);
           b.int_initializer("target", {4}, {1, 0, 4, 2});
           string_attr(node(b, "NegativeLogLikelihoodLoss", {"input", "target"}), "reduction",
                       reduction);
         },
         std::string(reduction) == "none" ? std::vector<int64_t>{4} : std::vector<int64_t>{},
         {"input"}});
  }
  all.push_back({"NegativeLogLikelihoodLoss_weights_ignore_index_3d",
                 [](OnnxBuilder& b) {
                   param(b, "input", {2, 3, 2}, 44);
                   b.float_constant("cw", {3}, {0.5f, 1.5f, 1.0f});
                   b.int_initializer("target", {2, 2}, {1, -1, 2, 0});
                   auto& n = node(b, "NegativeLogLikelihoodLoss", {"input", "target", "cw"});
                   OnnxBuilder::attr(n, "ignore_index", int64_t{-1});
                 },
                 {},
                 {"input"}});
}

void add_einsum_cases(std::vector<GradientCase>& all) {
  struct Form {
    std::string name, equation;
    std::vector<int64_t> a, w, out;
  };
  const std::vector<Form> forms = {
      {"moe_dispatch", "sec,sm->ecm", {4, 3, 2}, {4, 5}, {3, 2, 5}},
      {"moe_combine", "sec,ecm->sm", {4, 3, 2}, {3, 2, 5}, {4, 5}},
      {"attention_scores", "bhqd,bhkd->bhqk", {2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 3, 5}},
      {"attention_values", "bhqk,bhkd->bhqd", {2, 2, 3, 5}, {2, 2, 5, 4}, {2, 2, 3, 4}},
      {"summed_label", "ijk,jl->il", {2, 3, 4}, {3, 5}, {2, 5}},
      {"broadcast_batch", "bij,bjk->bik", {1, 3, 4}, {2, 4, 5}, {2, 3, 5}},
      {"permuted_output", "bij,bjk->kib", {2, 3, 4}, {2, 4, 5}, {5, 3, 2}},
      {"implicit_ellipsis", "...ij,jk", {2, 3, 4}, {4, 5}, {2, 3, 5}},
  };
  for (const Form& f : forms) {
    all.push_back({"Einsum_" + f.name,
                   [f](OnnxBuilder& b) {
                     param(b, "a", f.a, 50);
                     param(b, "w", f.w, 51);
                     string_attr(node(b, "Einsum", {"a", "w"}), "equation", f.equation);
                   },
                   f.out,
                   {"a", "w"}});
  }
  all.push_back({"Einsum_three_operands",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3}, 52);
                   param(b, "w", {3, 4}, 53);
                   param(b, "c", {4, 2}, 54);
                   string_attr(node(b, "Einsum", {"a", "w", "c"}), "equation", "ij,jk,kl->il");
                 },
                 {2, 2},
                 {"a", "w", "c"}});
  all.push_back({"Einsum_single_operand_sum",
                 [](OnnxBuilder& b) {
                   param(b, "a", {3, 4}, 55);
                   string_attr(node(b, "Einsum", {"a"}), "equation", "ij->j");
                 },
                 {4},
                 {"a"}});
}

// Pow, Sqrt, Reciprocal, Exp, Log, Erf, Max, Min, Softmax, LogSoftmax, LayerNormalization,
// ReduceMax, Cast, and the comparisons (accepted, not differentiated).
void add_math_and_normalization_cases(std::vector<GradientCase>& all) {
  all.push_back({"Pow_base_and_exponent_broadcast",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3}, 50, 0.5f, 2.0f);  // positive: log(a) in dB
                   param(b, "w", {3}, 51, -1.5f, 2.5f);
                   node(b, "Pow", {"a", "w"});
                 },
                 {2, 3},
                 {"a", "w"}});
  for (const auto& [exponent, suffix] :
       {std::pair{2.0f, "2"}, std::pair{3.0f, "3"}, std::pair{-0.5f, "minus_half"}}) {
    all.push_back({std::string("Pow_constant_exponent_") + suffix,
                   [exponent = exponent](OnnxBuilder& b) {
                     param(b, "a", {2, 3}, 52, 0.5f, 2.0f);
                     OnnxBuilder::attr(b.node("Constant", {}, {"e"}), "value_float", exponent);
                     node(b, "Pow", {"a", "e"});
                   },
                   {2, 3},
                   {"a"}});
  }
  all.push_back({"Pow_int64_exponent",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3}, 53);
                   b.int_initializer("e", {}, {3});
                   node(b, "Pow", {"a", "e"});
                 },
                 {2, 3},
                 {"a"}});
  struct Unary {
    const char* op;
    float low, high;
  };
  for (const Unary& u :
       {Unary{"Sqrt", 0.5f, 2.0f}, Unary{"Reciprocal", 0.5f, 2.0f}, Unary{"Exp", -1.0f, 1.0f},
        Unary{"Log", 0.5f, 2.0f}, Unary{"Erf", -1.5f, 1.5f}}) {
    all.push_back({u.op,
                   [u](OnnxBuilder& b) {
                     param(b, "a", {2, 3}, 54, u.low, u.high);
                     node(b, u.op, {"a"});
                   },
                   {2, 3},
                   {"a"}});
  }
  for (const char* op : {"Max", "Min"}) {
    // Values 0.1 apart at least, so no nudge crosses a tie.
    all.push_back({std::string(op) + "_three_broadcast",
                   [op](OnnxBuilder& b) {
                     b.initializer("a", {2, 3}, {0.1f, -0.9f, 0.5f, 1.3f, -0.2f, 0.8f});
                     b.initializer("w", {3}, {0.3f, -0.5f, 0.7f});
                     b.initializer("c", {2, 1}, {-0.7f, 0.95f});
                     node(b, op, {"a", "w", "c"});
                   },
                   {2, 3},
                   {"a", "w", "c"}});
  }
  all.push_back({"Max_single_input",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3}, 55);
                   node(b, "Max", {"a"});
                 },
                 {2, 3},
                 {"a"}});
  for (int64_t axis : {1, -1}) {
    const std::string suffix = axis < 0 ? "_axis_last" : "_axis1";
    all.push_back({"Softmax" + suffix,
                   [axis](OnnxBuilder& b) {
                     param(b, "a", {2, 3, 4}, 56, -2, 2);
                     OnnxBuilder::attr(node(b, "Softmax", {"a"}), "axis", axis);
                   },
                   {2, 3, 4},
                   {"a"}});
    all.push_back({"LogSoftmax" + suffix,
                   [axis](OnnxBuilder& b) {
                     param(b, "a", {2, 3, 4}, 57, -2, 2);
                     OnnxBuilder::attr(node(b, "LogSoftmax", {"a"}), "axis", axis);
                   },
                   {2, 3, 4},
                   {"a"}});
  }
  all.push_back({"LayerNormalization_last_axis",
                 [](OnnxBuilder& b) {
                   param(b, "x", {3, 5}, 58, -2, 2);
                   param(b, "scale", {5}, 59, 0.5f, 1.5f);
                   param(b, "bias", {5}, 60);
                   node(b, "LayerNormalization", {"x", "scale", "bias"});
                 },
                 {3, 5},
                 {"x", "scale", "bias"}});
  // Two normalized axes, no bias, the Mean output named by the model (InvStdDev added).
  all.push_back({"LayerNormalization_axis1_with_mean_output",
                 [](OnnxBuilder& b) {
                   param(b, "x", {2, 3, 2}, 61, -2, 2);
                   param(b, "scale", {3, 2}, 62, 0.5f, 1.5f);
                   auto& n = b.node("LayerNormalization", {"x", "scale"}, {"out", "mean"});
                   OnnxBuilder::attr(n, "axis", int64_t{1});
                   OnnxBuilder::attr(n, "epsilon", 1e-3f);
                 },
                 {2, 3, 2},
                 {"x", "scale"}});
  for (int64_t keepdims : {0, 1}) {
    all.push_back({"ReduceMax_keepdims" + std::to_string(keepdims),
                   [keepdims](OnnxBuilder& b) {
                     // Values 0.1 apart, so no nudge changes which element is the maximum.
                     std::vector<float> values(24);
                     for (int i = 0; i < 24; ++i)
                       values[i] = static_cast<float>((i * 7) % 24) * 0.1f - 1.2f;
                     b.initializer("a", {2, 3, 4}, values);
                     auto& n = node(b, "ReduceMax", {"a"});
                     OnnxBuilder::attr(n, "axes", std::vector<int64_t>{0, -1});
                     OnnxBuilder::attr(n, "keepdims", keepdims);
                   },
                   keepdims ? std::vector<int64_t>{1, 3, 1} : std::vector<int64_t>{3},
                   {"a"}});
  }
  all.push_back({"Cast_float_to_float",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3}, 64);
                   OnnxBuilder::attr(node(b, "Cast", {"a"}), "to", int64_t{1});
                 },
                 {2, 3},
                 {"a"}});
  // out = a · float((a > 0) == not(a < 0.5)): the comparisons, Not and the casts to and from
  // bool plan and run; the gradient flows through the Mul only.
  all.push_back({"Comparisons_Not_Cast_carry_no_gradient",
                 [](OnnxBuilder& b) {
                   // At least 0.05 from the thresholds 0 and 0.5, so no nudge crosses one.
                   b.initializer("s", {2, 3}, {-0.8f, 0.2f, 0.7f, -0.3f, 0.35f, 0.9f});
                   OnnxBuilder::attr(b.node("Constant", {}, {"zero"}), "value_float", 0.0f);
                   OnnxBuilder::attr(b.node("Constant", {}, {"half"}), "value_float", 0.5f);
                   b.node("Greater", {"s", "zero"}, {"gt"});
                   b.node("Less", {"s", "half"}, {"lt"});
                   b.node("Not", {"lt"}, {"ge"});
                   b.node("Equal", {"gt", "ge"}, {"eq"});
                   OnnxBuilder::attr(b.node("Cast", {"eq"}, {"m"}), "to", int64_t{1});
                   OnnxBuilder::attr(b.node("Cast", {"s"}, {"si"}), "to", int64_t{7});
                   OnnxBuilder::attr(b.node("Cast", {"si"}, {"sf"}), "to", int64_t{1});
                   b.node("Mul", {"s", "m"}, {"sm"});
                   b.node("Add", {"sm", "sf"}, {"out"});
                 },
                 {2, 3},
                 {"s"}});
}

// The fused ops of planner/fusion, built from the op patterns the fusion pass rewrites.
void add_fused_cases(std::vector<GradientCase>& all) {
  const auto attention = [](const std::string& mask) {
    return [mask](OnnxBuilder& b) {
      param(b, "q", {1, 2, 4, 3}, 40);
      param(b, "kt", {1, 2, 3, 4}, 41);
      param(b, "v", {1, 2, 4, 2}, 42);
      b.float_constant("scale", {}, {0.6f});
      b.node("MatMul", {"q", "kt"}, {"s"});
      b.node("Mul", {"s", "scale"}, {"scaled"});
      if (mask == "causal") {
        b.float_constant("lower", {4, 4}, {1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1});
        b.float_constant("zero", {}, {0.0f});
        b.node("Equal", {"lower", "zero"}, {"hidden"});
        b.float_constant("fill", {}, {-INFINITY});
        b.node("Where", {"hidden", "fill", "scaled"}, {"masked"});
      } else {
        b.float_constant("bias", {4, 4}, random_values(16, 43));
        b.node("Add", {"scaled", "bias"}, {"masked"});
      }
      OnnxBuilder::attr(b.node("Softmax", {"masked"}, {"p"}), "axis", int64_t{-1});
      b.node("MatMul", {"p", "v"}, {"out"});
    };
  };
  for (const char* mask : {"causal", "additive"}) {
    all.push_back({std::string("FusedAttention_") + mask + "_mask",
                   attention(mask),
                   {1, 2, 4, 2},
                   {"q", "kt", "v"},
                   false,
                   "piper.FusedAttention"});
  }
  for (const bool tanh : {false, true}) {
    all.push_back({tanh ? "BiasGelu_tanh" : "BiasGelu_erf",
                   [tanh](OnnxBuilder& b) {
                     param(b, "x", {3, 4}, 44, -2, 2);
                     param(b, "bias", {4}, 45);
                     b.node("Add", {"x", "bias"}, {"h"});
                     if (tanh) {
                       b.node("Mul", {"h", "h"}, {"h2"});
                       b.node("Mul", {"h", "h2"}, {"h3"});
                       b.float_constant("c", {}, {0.044715f});
                       b.node("Mul", {"c", "h3"}, {"ch3"});
                       b.node("Add", {"h", "ch3"}, {"inner"});
                       b.float_constant("k", {}, {0.7978845608f});
                       b.node("Mul", {"k", "inner"}, {"u"});
                       b.node("Tanh", {"u"}, {"e"});
                     } else {
                       b.float_constant("root2", {}, {1.41421356f});
                       b.node("Div", {"h", "root2"}, {"u"});
                       b.node("Erf", {"u"}, {"e"});
                     }
                     b.float_constant("one", {}, {1.0f});
                     b.node("Add", {"e", "one"}, {"a"});
                     b.node("Mul", {"h", "a"}, {"m"});
                     b.float_constant("half", {}, {0.5f});
                     b.node("Mul", {"m", "half"}, {"out"});
                   },
                   {3, 4},
                   {"x", "bias"},
                   false,
                   "piper.BiasGelu"});
  }
  all.push_back(
      {"LayerNorm_from_separate_ops",
       [](OnnxBuilder& b) {
         param(b, "x", {3, 5}, 46, -2, 2);
         param(b, "gamma", {5}, 47);
         param(b, "beta", {5}, 48);
         OnnxBuilder::attr(b.node("ReduceMean", {"x"}, {"mean"}), "axes", std::vector<int64_t>{-1});
         b.node("Sub", {"x", "mean"}, {"d"});
         b.float_constant("two", {}, {2.0f});
         b.node("Pow", {"d", "two"}, {"sq"});
         OnnxBuilder::attr(b.node("ReduceMean", {"sq"}, {"var"}), "axes", std::vector<int64_t>{-1});
         b.float_constant("eps", {}, {1e-5f});
         b.node("Add", {"var", "eps"}, {"ve"});
         b.node("Sqrt", {"ve"}, {"std"});
         b.node("Div", {"d", "std"}, {"n"});
         b.node("Mul", {"n", "gamma"}, {"scaled"});
         b.node("Add", {"scaled", "beta"}, {"out"});
       },
       {3, 5},
       {"x", "gamma", "beta"},
       false,
       "LayerNormalization"});
}

// Activations with attributes and Clip: inputs at least 0.1 from every kink (eps is 1e-2).
void add_activation_cases(std::vector<GradientCase>& all) {
  struct Activation {
    const char* name;
    const char* op;
    std::vector<std::pair<const char*, float>> attributes;
    float low, high, away_from_zero;
  };
  for (const Activation& a : {
           Activation{"Abs", "Abs", {}, -1, 1, 0.1f},
           Activation{"LeakyRelu", "LeakyRelu", {{"alpha", 0.1f}}, -1, 1, 0.1f},
           Activation{"Softplus", "Softplus", {}, -3, 3, 0},
           Activation{"Elu", "Elu", {{"alpha", 0.5f}}, -2, 2, 0.1f},
           Activation{"Selu", "Selu", {}, -2, 2, 0.1f},
           Activation{"Celu", "Celu", {{"alpha", 2.0f}}, -2, 2, 0.1f},
           Activation{"HardSigmoid", "HardSigmoid", {{"alpha", 0.3f}, {"beta", 0.4f}}, -1, 1, 0},
           Activation{"HardSwish", "HardSwish", {}, -2.5f, 2.5f, 0},
       }) {
    all.push_back({a.name,
                   [a](OnnxBuilder& b) {
                     param(b, "a", {2, 3}, 20, a.low, a.high, a.away_from_zero);
                     auto& n = node(b, a.op, {"a"});
                     for (const auto& [name, value] : a.attributes)
                       OnnxBuilder::attr(n, name, value);
                   },
                   {2, 3},
                   {"a"}});
  }
  all.push_back({"PRelu_broadcast_slope",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3}, 21, -1, 1, 0.1f);
                   param(b, "w", {3}, 22, 0.1f, 0.5f);
                   node(b, "PRelu", {"a", "w"});
                 },
                 {2, 3},
                 {"a", "w"}});
  // Values on both sides of the bounds and between them; one bound omitted.
  all.push_back({"Clip",
                 [](OnnxBuilder& b) {
                   b.initializer("a", {2, 3}, {-0.9f, -0.2f, 0.1f, 0.3f, 0.8f, -0.7f});
                   OnnxBuilder::attr(b.node("Constant", {}, {"lo"}), "value_float", -0.5f);
                   OnnxBuilder::attr(b.node("Constant", {}, {"hi"}), "value_float", 0.5f);
                   node(b, "Clip", {"a", "lo", "hi"});
                 },
                 {2, 3},
                 {"a"}});
  all.push_back({"Clip_max_only",
                 [](OnnxBuilder& b) {
                   b.initializer("a", {2, 3}, {-0.9f, -0.2f, 0.1f, 0.3f, 0.8f, -0.7f});
                   OnnxBuilder::attr(b.node("Constant", {}, {"hi"}), "value_float", 0.2f);
                   node(b, "Clip", {"a", "", "hi"});
                 },
                 {2, 3},
                 {"a"}});
}

// The trigonometric and hyperbolic ops, Softsign and ThresholdedRelu on their smooth domains;
// Floor, Ceil, Round and Sign (zero gradient) times their input, so that the zero adds to a
// nonzero gradient, from values 0.1 or more from every jump (eps is 1e-2); int64 Abs in an
// undifferentiated branch, as T5's relative positions.
void add_unary_math_cases(std::vector<GradientCase>& all) {
  struct Unary {
    const char* op;
    float low, high;
  };
  for (const Unary& u :
       {Unary{"Sin", -3, 3}, Unary{"Cos", -3, 3}, Unary{"Tan", -1.2f, 1.2f}, Unary{"Sinh", -2, 2},
        Unary{"Cosh", -2, 2}, Unary{"Asin", -0.8f, 0.8f}, Unary{"Acos", -0.8f, 0.8f},
        Unary{"Atan", -2, 2}, Unary{"Asinh", -2, 2}, Unary{"Acosh", 1.2f, 3},
        Unary{"Atanh", -0.8f, 0.8f}, Unary{"Softsign", -2, 2}}) {
    all.push_back({u.op,
                   [u](OnnxBuilder& b) {
                     param(b, "a", {2, 3}, 23, u.low, u.high);
                     node(b, u.op, {"a"});
                   },
                   {2, 3},
                   {"a"}});
  }
  all.push_back({"ThresholdedRelu",
                 [](OnnxBuilder& b) {
                   b.initializer("a", {2, 3}, {-0.9f, 0.1f, 0.2f, 0.4f, 0.8f, 1.5f});
                   OnnxBuilder::attr(node(b, "ThresholdedRelu", {"a"}), "alpha", 0.3f);
                 },
                 {2, 3},
                 {"a"}});
  for (const char* op : {"Floor", "Ceil", "Round", "Sign"}) {
    all.push_back({std::string(op) + "_times_input",
                   [op](OnnxBuilder& b) {
                     b.initializer("a", {2, 3}, {-1.8f, -0.7f, -0.2f, 0.3f, 1.2f, 2.6f});
                     b.node(op, {"a"}, {"stepped"});
                     node(b, "Mul", {"stepped", "a"});
                   },
                   {2, 3},
                   {"a"}});
  }
  all.push_back({"Abs_int64_positions",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3}, 24);
                   b.int_initializer("positions", {3}, {-2, 0, 3});
                   b.node("Abs", {"positions"}, {"distance"});
                   OnnxBuilder::attr(b.node("Cast", {"distance"}, {"scale"}), "to",
                                     int64_t{onnx::TensorProto::FLOAT});
                   node(b, "Mul", {"a", "scale"});
                 },
                 {2, 3},
                 {"a"},
                 false,
                 "Abs"});
}

// Tile, the scatters and GatherND. Indices of reduction-none scatters are distinct (an update
// a later one overwrites has no effect on the loss, but gets the gradient PyTorch gives it).
void add_scatter_cases(std::vector<GradientCase>& all) {
  all.push_back({"Tile",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 1, 3}, 40);
                   b.int_initializer("repeats", {3}, {2, 3, 1});
                   node(b, "Tile", {"a", "repeats"});
                 },
                 {4, 3, 3},
                 {"a"}});
  all.push_back({"ScatterND",
                 [](OnnxBuilder& b) {
                   param(b, "a", {4, 3}, 41);
                   b.int_initializer("idx", {2, 1}, {3, 0});
                   param(b, "u", {2, 3}, 42);
                   node(b, "ScatterND", {"a", "idx", "u"});
                 },
                 {4, 3},
                 {"a", "u"}});
  all.push_back({"ScatterND_add_repeated",
                 [](OnnxBuilder& b) {
                   param(b, "a", {3, 4}, 43);
                   b.int_initializer("idx", {3, 2}, {0, 1, 2, -1, 0, 1});
                   param(b, "u", {3}, 44);
                   string_attr(node(b, "ScatterND", {"a", "idx", "u"}), "reduction", "add");
                 },
                 {3, 4},
                 {"a", "u"}});
  all.push_back({"ScatterElements",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 4}, 45);
                   b.int_initializer("idx", {2, 2}, {3, 0, -3, 2});
                   param(b, "u", {2, 2}, 46);
                   auto& n = node(b, "ScatterElements", {"a", "idx", "u"});
                   OnnxBuilder::attr(n, "axis", int64_t{1});
                 },
                 {2, 4},
                 {"a", "u"}});
  all.push_back({"ScatterElements_add_repeated",
                 [](OnnxBuilder& b) {
                   param(b, "a", {3, 2}, 47);
                   b.int_initializer("idx", {4, 2}, {0, 2, 0, 1, 2, 2, 1, 0});
                   param(b, "u", {4, 2}, 48);
                   string_attr(node(b, "ScatterElements", {"a", "idx", "u"}), "reduction", "add");
                 },
                 {3, 2},
                 {"a", "u"}});
  all.push_back({"GatherND_repeated",
                 [](OnnxBuilder& b) {
                   param(b, "a", {3, 4, 2}, 49);
                   b.int_initializer("idx", {3, 2}, {0, 1, 2, -1, 0, 1});
                   node(b, "GatherND", {"a", "idx"});
                 },
                 {3, 2},
                 {"a"}});
  all.push_back({"GatherND_batch_dims",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3, 4}, 50);
                   b.int_initializer("idx", {2, 2, 1}, {0, 2, 1, 1});
                   OnnxBuilder::attr(node(b, "GatherND", {"a", "idx"}), "batch_dims", int64_t{1});
                 },
                 {2, 2, 4},
                 {"a"}});
}

std::vector<GradientCase> cases() {
  std::vector<GradientCase> all;
  for (int64_t ta : {0, 1}) {
    for (int64_t tb : {0, 1}) {
      all.push_back(
          {"Gemm_tA" + std::to_string(ta) + "_tB" + std::to_string(tb),
           [=](OnnxBuilder& b) {
             param(b, "a", ta ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4}, 1);
             param(b, "w", tb ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5}, 2);
             param(b, "c", {5}, 3);
             auto& n = node(b, "Gemm", {"a", "w", "c"});
             OnnxBuilder::attr(n, "transA", ta);
             OnnxBuilder::attr(n, "transB", tb);
             OnnxBuilder::attr(n, "alpha", 0.7f);
             OnnxBuilder::attr(n, "beta", 1.5f);
           },
           {3, 5},
           {"a", "w", "c"}});
    }
  }
  all.push_back({"MatMul_batched_broadcast",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3, 4}, 4);
                   param(b, "w", {4, 5}, 5);
                   node(b, "MatMul", {"a", "w"});
                 },
                 {2, 3, 5},
                 {"a", "w"}});
  all.push_back({"MatMul_broadcast_left",
                 [](OnnxBuilder& b) {
                   param(b, "a", {3, 4}, 6);
                   param(b, "w", {2, 1, 4, 5}, 7);
                   node(b, "MatMul", {"a", "w"});
                 },
                 {2, 1, 3, 5},
                 {"a", "w"}});
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    all.push_back({std::string(op) + "_broadcast",
                   [op](OnnxBuilder& b) {
                     param(b, "a", {2, 3}, 8);
                     param(b, "w", {3}, 9, 0.5f, 2.0f);  // away from zero for Div
                     node(b, op, {"a", "w"});
                   },
                   {2, 3},
                   {"a", "w"}});
  }
  all.push_back({"Sum_three",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3}, 10);
                   param(b, "w", {3}, 11);
                   param(b, "c", {2, 1}, 12);
                   node(b, "Sum", {"a", "w", "c"});
                 },
                 {2, 3},
                 {"a", "w", "c"}});
  for (const char* op : {"Neg", "Tanh", "Sigmoid", "Identity"}) {
    all.push_back({op,
                   [op](OnnxBuilder& b) {
                     param(b, "a", {2, 3}, 13);
                     node(b, op, {"a"});
                   },
                   {2, 3},
                   {"a"}});
  }
  all.push_back({"Relu",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3}, 14, -1, 1, 0.1f);  // no element near the kink
                   node(b, "Relu", {"a"});
                 },
                 {2, 3},
                 {"a"}});
  add_activation_cases(all);
  add_unary_math_cases(all);
  all.push_back({"Reshape",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 6}, 15);
                   b.int_initializer("shape", {3}, {3, -1, 2});
                   node(b, "Reshape", {"a", "shape"});
                 },
                 {3, 2, 2},
                 {"a"}});
  all.push_back({"Flatten",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3, 2}, 16);
                   OnnxBuilder::attr(node(b, "Flatten", {"a"}), "axis", int64_t{1});
                 },
                 {2, 6},
                 {"a"}});
  all.push_back(
      {"Transpose",
       [](OnnxBuilder& b) {
         param(b, "a", {2, 3, 4}, 17);
         OnnxBuilder::attr(node(b, "Transpose", {"a"}), "perm", std::vector<int64_t>{1, 2, 0});
       },
       {3, 4, 2},
       {"a"}});
  all.push_back({"Unsqueeze_Squeeze",
                 [](OnnxBuilder& b) {
                   param(b, "a", {2, 3}, 18);
                   b.int_initializer("axes", {1}, {1});
                   b.node("Unsqueeze", {"a", "axes"}, {"u"});
                   param(b, "w", {2, 1, 3}, 19);
                   b.node("Mul", {"u", "w"}, {"m"});
                   b.node("Squeeze", {"m", "axes"}, {"out"});
                 },
                 {2, 3},
                 {"a", "w"}});
  for (int64_t keepdims : {0, 1}) {
    const std::string suffix = "_keepdims" + std::to_string(keepdims);
    all.push_back({"ReduceMean" + suffix,
                   [=](OnnxBuilder& b) {
                     param(b, "a", {2, 3, 4}, 20);
                     auto& n = node(b, "ReduceMean", {"a"});
                     OnnxBuilder::attr(n, "axes", std::vector<int64_t>{-1, 0});
                     OnnxBuilder::attr(n, "keepdims", keepdims);
                   },
                   keepdims ? std::vector<int64_t>{1, 3, 1} : std::vector<int64_t>{3},
                   {"a"}});
    all.push_back({"ReduceSum" + suffix,
                   [=](OnnxBuilder& b) {
                     param(b, "a", {2, 3, 4}, 21);
                     b.int_initializer("axes", {1}, {1});
                     OnnxBuilder::attr(node(b, "ReduceSum", {"a", "axes"}), "keepdims", keepdims);
                   },
                   keepdims ? std::vector<int64_t>{2, 1, 4} : std::vector<int64_t>{2, 4},
                   {"a"}});
  }
  for (const char* reduction : {"mean", "sum", "none"}) {
    all.push_back(
        {std::string("SoftmaxCrossEntropyLoss_") + reduction,
         [=](OnnxBuilder& b) {
           param(b, "scores", {4, 5}, 22, -2, 2);
           b.int_initializer("labels", {4}, {1, 0, 4, 2});
           auto& n = node(b, "SoftmaxCrossEntropyLoss", {"scores", "labels"});
           auto* attr = n.add_attribute();
           attr->set_name("reduction");
           attr->set_type(onnx::AttributeProto::STRING);
           attr->set_s(reduction);
         },
         std::string(reduction) == "none" ? std::vector<int64_t>{4} : std::vector<int64_t>{},
         {"scores"}});
  }
  all.push_back({"SoftmaxCrossEntropyLoss_weights_ignore_index_3d",
                 [](OnnxBuilder& b) {
                   param(b, "scores", {2, 3, 2}, 23, -2, 2);
                   param(b, "cw", {3}, 24, 0.5f, 1.5f);
                   b.int_initializer("labels", {2, 2}, {1, -1, 2, 0});
                   auto& n = node(b, "SoftmaxCrossEntropyLoss", {"scores", "labels", "cw"});
                   OnnxBuilder::attr(n, "ignore_index", int64_t{-1});
                 },
                 {},
                 {"scores"}});
  add_indexing_and_layout_cases(all);
  add_scatter_cases(all);
  add_einsum_cases(all);
  add_math_and_normalization_cases(all);
  add_fused_cases(all);
  return all;
}

INSTANTIATE_TEST_SUITE_P(Rules, GradientCheck, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace piper
