// Every gradient rule against central finite differences: the planner
// differentiates a one-op model, the CPU engine runs it, and the loss is
// re-evaluated with each parameter element nudged both ways.
#include <gtest/gtest.h>

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
  const auto dir = std::filesystem::temp_directory_path() / ("piper_gradcheck_" + c.name);
  std::filesystem::create_directories(dir);
  const std::string model_path = (dir / "model.onnx").string();
  formats::write_file_atomically(model_path, b.model().SerializeAsString());

  strategy::Strategy strategy;
  strategy.source = "gradient_check";
  strategy.global_batch = 1;
  strategy.optimizer.lr = 0;  // the step leaves parameters as they are
  strategy.frozen = {"r"};
  auto planned = planner::plan_model(model_path, strategy);
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
  return all;
}

INSTANTIATE_TEST_SUITE_P(Rules, GradientCheck, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace piper
