// The fusion pass (planner/fusion): which patterns its rules fuse and which near misses they
// leave alone, on the gpt sample and on small models written here; and for every case, one
// training step planned with and without fusion gives the same loss and gradients.
#include "planner/fusion/fusion.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <random>

#include "engine/runtime/session.h"
#include "formats/atomic_file.h"
#include "gpt_sample.h"
#include "onnx_builder.h"
#include "planner/import/import.h"
#include "planner/plan_model.h"

namespace piper {
namespace {

using testing::OnnxBuilder;

std::map<std::string, int> op_counts(const ir::OpGraph& graph) {
  std::map<std::string, int> counts;
  for (const ir::Op& op : graph.ops()) ++counts[op.type];
  return counts;
}

const ir::Op& only_op(const ir::OpGraph& graph, const std::string& type,
                      const std::string& name_prefix) {
  const ir::Op* found = nullptr;
  for (const ir::Op& op : graph.ops()) {
    if (op.type != type || op.name.rfind(name_prefix, 0) != 0) continue;
    EXPECT_EQ(found, nullptr) << "two " << type << " ops under " << name_prefix;
    found = &op;
  }
  if (found == nullptr) throw std::runtime_error("no " + type + " under " + name_prefix);
  return *found;
}

TEST(Fusion, GptSampleFusesAttentionGeluAndLinearLayers) {
  ir::OpGraph graph = testing::import_gpt_sample(2);
  const int before = graph.num_ops();
  const auto fused = planner::fuse(graph, planner::default_fusion_rules());
  EXPECT_EQ(fused, (std::map<std::string, int>{{"fuse-attention", 2},
                                               {"fuse-bias-gelu", 2},
                                               {"fuse-layer-norm", 0},
                                               {"fuse-linear", 2 * 6 + 1},
                                               {"fuse-linear-gelu", 0}}));
  // Per layer: MatMul, Mul, Where, Softmax, MatMul -> 1; Add, Div, Erf, Add, Mul, Mul -> 1;
  // Transpose, MatMul, Add -> 1 for q, v, proj and fc2; Transpose, MatMul -> 1 for k (no bias)
  // and fc1 (its bias went to GELU). The head: Transpose, MatMul, Add -> 1.
  EXPECT_EQ(graph.num_ops(), before - 2 * 4 - 2 * 5 - 2 * (4 * 2 + 2) - 2);
  const auto counts = op_counts(graph);
  for (const char* gone : {"Softmax", "Where", "Erf", "Div", "MatMul"}) {
    EXPECT_EQ(counts.count(gone), 0u) << gone;
  }
  for (const ir::Op& op : graph.ops()) {
    if (op.type != "Transpose") continue;
    EXPECT_NE(graph.tensor(op.inputs[0]).role, ir::Role::kParameter) << op.name;
  }
  EXPECT_EQ(counts.at("LayerNormalization"), 5);  // 2 per layer and the final one
  for (int l = 0; l < 2; ++l) {
    const std::string layer = "/blocks." + std::to_string(l) + "/";
    const ir::Op& attention = only_op(graph, "piper.FusedAttention", layer);
    ASSERT_EQ(attention.inputs.size(), 4u) << layer;
    EXPECT_EQ(graph.tensor(attention.inputs[0]).shape, (ir::Shape{2, 2, 16, 16}));  // Q
    EXPECT_EQ(graph.tensor(attention.inputs[1]).shape, (ir::Shape{2, 2, 16, 16}));  // Kt
    EXPECT_EQ(graph.tensor(attention.inputs[3]).dtype, ir::DType::kBool);           // mask
    EXPECT_EQ(ir::attr_float(attention.attributes, "scale", 0), 0.25);
    EXPECT_EQ(ir::attr_float(attention.attributes, "fill", 0), -INFINITY);
    EXPECT_EQ(ir::attr_int(attention.attributes, "fill_if", -1), 1);
    const ir::Op& gelu = only_op(graph, "piper.BiasGelu", layer);
    ASSERT_EQ(gelu.inputs.size(), 2u) << layer << ": the fc bias is fused";
    EXPECT_EQ(graph.tensor(gelu.inputs[1]).initializer,
              "blocks." + std::to_string(l) + ".mlp.fc.bias");
    const ir::Op& q = only_op(graph, "piper.MatMul", layer + "attn/q/");
    ASSERT_EQ(q.inputs.size(), 3u) << layer << ": the q bias is fused";
    EXPECT_EQ(graph.tensor(q.inputs[1]).initializer,
              "blocks." + std::to_string(l) + ".attn.q.weight");  // as stored, [out, in]
    EXPECT_EQ(ir::attr_int(q.attributes, "transB", 0), 1);
    EXPECT_EQ(graph.tensor(q.inputs[2]).initializer,
              "blocks." + std::to_string(l) + ".attn.q.bias");
    EXPECT_EQ(only_op(graph, "piper.MatMul", layer + "attn/k/").inputs.size(), 2u);
  }
}

std::vector<float> random_values(int64_t count, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> values(count);
  for (float& v : values) v = uniform(generator);
  return values;
}

void param(OnnxBuilder& b, const std::string& name, const ir::Shape& shape, uint32_t seed) {
  b.initializer(name, shape, random_values(ir::num_elements(shape), seed));
}

void scalar(OnnxBuilder& b, const std::string& name, float value) {
  b.float_constant(name, {}, {value});
}

// Trained Q [1, 2, 5, 3], Kt [1, 2, 3, 5] (or `kt_shape`) and V [1, 2, 5, 4].
void qkv(OnnxBuilder& b, const ir::Shape& kt_shape = {1, 2, 3, 5}) {
  param(b, "q", {1, 2, 5, 3}, 1);
  param(b, "kt", kt_shape, 2);
  param(b, "v", {1, 2, 5, 4}, 3);
}

// "causal": a bool [5, 5] constant, true above the diagonal (the keys a query may not see).
void causal(OnnxBuilder& b) {
  std::vector<float> lower(25, 0.0f);
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j <= i; ++j) lower[i * 5 + j] = 1.0f;
  }
  b.float_constant("lower", {5, 5}, lower);
  scalar(b, "zero", 0.0f);
  b.node("Equal", {"lower", "zero"}, {"causal"});
}

// `out` = Dropout(`in`, `ratio`, training_mode true), as PyTorch exports nn.Dropout in
// training mode; `mask` names its second output when not empty.
void training_dropout(OnnxBuilder& b, const std::string& in, const std::string& out, float ratio,
                      const std::string& mask = "") {
  scalar(b, out + "_ratio", ratio);
  scalar(b, out + "_one", 1.0f);
  OnnxBuilder::attr(b.node("Cast", {out + "_one"}, {out + "_training"}), "to", int64_t{9});
  std::vector<std::string> outputs = {out};
  if (!mask.empty()) outputs.push_back(mask);
  b.node("Dropout", {in, out + "_ratio", out + "_training"}, outputs);
}

// `out` = `in`[start:end:step] along `axis`.
void slice(OnnxBuilder& b, const std::string& in, const std::string& out, int64_t axis,
           int64_t start, int64_t end, int64_t step = 1) {
  b.int_initializer(out + "_starts", {1}, {start});
  b.int_initializer(out + "_ends", {1}, {end});
  b.int_initializer(out + "_axes", {1}, {axis});
  b.int_initializer(out + "_steps", {1}, {step});
  b.node("Slice", {in, out + "_starts", out + "_ends", out + "_axes", out + "_steps"}, {out});
}

// `counts` with `changes` written over it.
std::map<std::string, int> with(std::map<std::string, int> counts,
                                const std::map<std::string, int>& changes) {
  for (const auto& [type, count] : changes) counts[type] = count;
  return counts;
}

// Softmax(`scores`) along `axis`, then · V into `out`.
void softmax_times_v(OnnxBuilder& b, const std::string& scores, const std::string& out = "out",
                     int64_t axis = -1) {
  OnnxBuilder::attr(b.node("Softmax", {scores}, {"p"}), "axis", axis);
  b.node("MatMul", {"p", "v"}, {out});
}

// Trained X [3, 6], gamma [6], beta [6]; "mean" = ReduceMean(X), "d" = X − mean.
void centered_x(OnnxBuilder& b, const ir::Shape& x = {3, 6}, std::vector<int64_t> axes = {-1}) {
  param(b, "x", x, 4);
  param(b, "gamma", ir::Shape(x.end() - static_cast<int64_t>(axes.size()), x.end()), 5);
  param(b, "beta", ir::Shape(x.end() - static_cast<int64_t>(axes.size()), x.end()), 6);
  OnnxBuilder::attr(b.node("ReduceMean", {"x"}, {"mean"}), "axes", axes);
  b.node("Sub", {"x", "mean"}, {"d"});
}

// "n" = d / sqrt(ReduceMean(`squared`) + 1e-5).
void normalized(OnnxBuilder& b, const std::string& squared, std::vector<int64_t> axes = {-1}) {
  OnnxBuilder::attr(b.node("ReduceMean", {squared}, {"var"}), "axes", axes);
  scalar(b, "eps", 1e-5f);
  b.node("Add", {"var", "eps"}, {"var_eps"});
  b.node("Sqrt", {"var_eps"}, {"std"});
  b.node("Div", {"d", "std"}, {"n"});
}

// H = Add(bias, X) with trained X [2, 3, 8] and bias [8].
void biased(OnnxBuilder& b) {
  param(b, "x", {2, 3, 8}, 7);
  param(b, "bias", {8}, 8);
  b.node("Add", {"bias", "x"}, {"h"});
}

// `out` = `half` · (H · (1 + Erf(`scaled`))) where the caller wrote `scaled` from "h".
void erf_tail(OnnxBuilder& b, const std::string& scaled, const std::string& out = "out",
              float half = 0.5f) {
  b.node("Erf", {scaled}, {"e"});
  scalar(b, "one", 1.0f);
  b.node("Add", {"e", "one"}, {"a"});
  b.node("Mul", {"h", "a"}, {"m"});
  scalar(b, "half", half);
  b.node("Mul", {"m", "half"}, {out});
}

// "out" = 0.5 · (H · (1 + Tanh(√(2/π) · (H + 0.044715 · `cube`)))).
void tanh_tail(OnnxBuilder& b, const std::string& cube) {
  scalar(b, "c", 0.044715f);
  b.node("Mul", {"c", cube}, {"c3"});
  b.node("Add", {"h", "c3"}, {"inner"});
  scalar(b, "k", 0.7978845608f);
  b.node("Mul", {"k", "inner"}, {"u"});
  b.node("Tanh", {"u"}, {"t"});
  scalar(b, "one", 1.0f);
  b.node("Add", {"one", "t"}, {"a"});
  b.node("Mul", {"h", "a"}, {"m"});
  scalar(b, "half", 0.5f);
  b.node("Mul", {"half", "m"}, {"out"});
}

struct FusionCase {
  std::string name;
  // Adds trained initializers and nodes writing "out".
  std::function<void(OnnxBuilder&)> build;
  // Op types and how many of each the fused forward graph holds (types not listed: any).
  std::map<std::string, int> expected;
  std::vector<std::string> parameters;
};

void PrintTo(const FusionCase& c, std::ostream* out) { *out << c.name; }

// The model of a case: loss = Σ exp(out) (not Σ out², which a normalization makes constant).
onnx::ModelProto case_model(const FusionCase& c) {
  OnnxBuilder b;
  c.build(b);
  b.node("Exp", {"out"}, {"exp"});
  OnnxBuilder::attr(b.node("ReduceSum", {"exp"}, {"loss"}), "keepdims", int64_t{0});
  b.output("loss", {});
  return b.model();
}

class FusionRules : public ::testing::TestWithParam<FusionCase> {};

TEST_P(FusionRules, FuseExactlyWhatTheKernelsSupport) {
  const FusionCase& c = GetParam();
  ir::OpGraph graph = planner::import_model(case_model(c), {}, c.name);
  planner::fuse(graph, planner::default_fusion_rules());
  const auto counts = op_counts(graph);
  for (const auto& [type, expected] : c.expected) {
    const auto found = counts.find(type);
    EXPECT_EQ(found == counts.end() ? 0 : found->second, expected) << c.name << ": " << type;
  }
}

// One step (learning rate 0) of the case planned with or without fusion: loss and gradients.
std::pair<double, std::map<std::string, std::vector<float>>> step(const FusionCase& c, bool fuse) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("piper_fusion_" + c.name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string model_path = (dir / "model.onnx").string();
  formats::write_file_atomically(model_path, case_model(c).SerializeAsString());
  strategy::Strategy strategy;
  strategy.source = "fusion_test";
  strategy.global_batch = 1;
  strategy.optimizer.lr = 0;
  planner::PlanningOptions options;
  options.fuse = fuse;
  const auto planned = planner::plan_model(model_path, strategy, options);
  engine::Session session(planned.plans.at(0), engine::make_backend("cpu"));
  std::filesystem::remove_all(dir);  // the session has loaded the parameters
  std::pair<double, std::map<std::string, std::vector<float>>> result;
  result.first = session.step({});
  for (const std::string& name : c.parameters) {
    result.second[name] = session.read_floats("grad/" + name);
  }
  return result;
}

TEST_P(FusionRules, FusedStepEqualsUnfusedWithinFloatRounding) {
  const FusionCase& c = GetParam();
  const auto [fused_loss, fused] = step(c, true);
  const auto [loss, unfused] = step(c, false);
  ASSERT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(fused_loss, loss, 1e-6 * std::abs(loss)) << c.name << ": loss";
  for (const std::string& name : c.parameters) {
    const std::vector<float>& want = unfused.at(name);
    const std::vector<float>& got = fused.at(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    double scale = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, static_cast<double>(std::abs(want[i])));
      worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
    }
    EXPECT_LE(worst, 1e-5 * scale) << c.name << ": d loss / d " << name;
  }
}

std::vector<FusionCase> attention_cases() {
  const std::vector<std::string> qkv_names = {"q", "kt", "v"};
  const std::map<std::string, int> fused = {{"piper.FusedAttention", 1}, {"Softmax", 0}};
  const std::map<std::string, int> unfused = {{"piper.FusedAttention", 0}, {"Softmax", 1}};
  std::vector<FusionCase> all;
  all.push_back({"attention_mul_scale_where_fill_true",  // PyTorch's masked_fill form
                 [](OnnxBuilder& b) {
                   qkv(b);
                   causal(b);
                   scalar(b, "scale", 0.5f);
                   scalar(b, "ninf", -INFINITY);
                   b.node("MatMul", {"q", "kt"}, {"s"});
                   b.node("Mul", {"s", "scale"}, {"scaled"});
                   b.node("Where", {"causal", "ninf", "scaled"}, {"masked"});
                   softmax_times_v(b, "masked");
                 },
                 fused, qkv_names});
  all.push_back({"attention_div_scale_additive_mask_first",
                 [](OnnxBuilder& b) {
                   qkv(b);
                   b.float_constant("bias", {1, 5, 5}, random_values(25, 9));
                   scalar(b, "root_d", 1.7320508f);
                   b.node("MatMul", {"q", "kt"}, {"s"});
                   b.node("Div", {"s", "root_d"}, {"scaled"});
                   b.node("Add", {"bias", "scaled"}, {"masked"});
                   softmax_times_v(b, "masked");
                 },
                 fused, qkv_names});
  all.push_back({"attention_scale_left_finite_fill_if_false",
                 [](OnnxBuilder& b) {
                   qkv(b);
                   causal(b);
                   scalar(b, "scale", 0.7f);
                   scalar(b, "fill", -2.0f);
                   b.node("MatMul", {"q", "kt"}, {"s"});
                   b.node("Mul", {"scale", "s"}, {"scaled"});
                   b.node("Not", {"causal"}, {"visible"});
                   b.node("Where", {"visible", "scaled", "fill"}, {"masked"});
                   softmax_times_v(b, "masked");
                 },
                 fused, qkv_names});
  all.push_back({"attention_without_scale_or_mask",
                 [](OnnxBuilder& b) {
                   qkv(b);
                   b.node("MatMul", {"q", "kt"}, {"s"});
                   softmax_times_v(b, "s");
                 },
                 fused, qkv_names});
  all.push_back({"attention_scores_read_twice",
                 [](OnnxBuilder& b) {
                   qkv(b);
                   scalar(b, "scale", 0.5f);
                   b.node("MatMul", {"q", "kt"}, {"s"});
                   b.node("Mul", {"s", "scale"}, {"scaled"});
                   softmax_times_v(b, "scaled", "attention");
                   b.node("MatMul", {"scaled", "v"}, {"again"});
                   b.node("Add", {"attention", "again"}, {"out"});
                 },
                 unfused, qkv_names});
  all.push_back({"attention_softmax_not_on_last_axis",
                 [](OnnxBuilder& b) {
                   qkv(b);
                   b.node("MatMul", {"q", "kt"}, {"s"});
                   softmax_times_v(b, "s", "out", 2);
                 },
                 unfused, qkv_names});
  all.push_back({"attention_inference_dropout_on_probabilities",
                 [](OnnxBuilder& b) {
                   qkv(b);
                   b.node("MatMul", {"q", "kt"}, {"s"});
                   b.node("Softmax", {"s"}, {"p0"});
                   b.node("Dropout", {"p0"}, {"p"});  // inference mode: identity
                   b.node("MatMul", {"p", "v"}, {"out"});
                 },
                 with(fused, {{"Dropout", 0}}), qkv_names});
  all.push_back({"attention_dropout_that_drops",
                 [](OnnxBuilder& b) {
                   qkv(b);
                   b.node("MatMul", {"q", "kt"}, {"s"});
                   b.node("Softmax", {"s"}, {"p0"});
                   training_dropout(b, "p0", "p", 0.5f);
                   b.node("MatMul", {"p", "v"}, {"out"});
                 },
                 with(unfused, {{"Dropout", 1}}), qkv_names});
  all.push_back({"attention_hf_gpt2_form",  // transformers 4.40 GPT2Attention, eager
                 [](OnnxBuilder& b) {
                   qkv(b);
                   causal(b);
                   scalar(b, "head_dim", 3.0f);
                   scalar(b, "half", 0.5f);
                   scalar(b, "zero_scale", 0.0f);
                   b.node("Pow", {"head_dim", "half"}, {"root"});
                   b.node("Add", {"zero_scale", "root"}, {"divisor"});
                   scalar(b, "min", -3.4028234663852886e38f);
                   b.node("MatMul", {"q", "kt"}, {"s"});
                   b.node("Div", {"s", "divisor"}, {"scaled"});
                   OnnxBuilder::attr(b.node("Cast", {"scaled"}, {"scaled_f"}), "to", int64_t{1});
                   b.node("Not", {"causal"}, {"visible"});
                   b.node("Where", {"visible", "scaled_f", "min"}, {"masked"});
                   b.node("Softmax", {"masked"}, {"p0"});
                   OnnxBuilder::attr(b.node("Cast", {"p0"}, {"p1"}), "to", int64_t{1});
                   training_dropout(b, "p1", "p", 0.0f);
                   b.node("MatMul", {"p", "v"}, {"out"});
                 },
                 with(fused, {{"Dropout", 0}, {"Cast", 0}, {"Pow", 0}, {"Where", 0}}), qkv_names});
  all.push_back({"attention_hf_llama_form",  // transformers 4.40 LlamaAttention, eager
                 [](OnnxBuilder& b) {
                   qkv(b);
                   b.float_constant("causal_bias", {5, 5}, random_values(25, 19));
                   b.int_initializer("batch_shape", {4}, {1, 1, 5, 5});
                   b.node("Expand", {"causal_bias", "batch_shape"}, {"expanded"});
                   slice(b, "expanded", "bias", 3, 0, 5);  // [..., :key_length]
                   scalar(b, "root_d", 1.7320508f);
                   b.node("MatMul", {"q", "kt"}, {"s"});
                   b.node("Div", {"s", "root_d"}, {"scaled"});
                   b.node("Add", {"scaled", "bias"}, {"masked"});
                   b.node("Softmax", {"masked"}, {"p0"});
                   OnnxBuilder::attr(b.node("Cast", {"p0"}, {"p1"}), "to", int64_t{1});
                   OnnxBuilder::attr(b.node("Cast", {"p1"}, {"p2"}), "to", int64_t{1});
                   training_dropout(b, "p2", "p", 0.0f);
                   b.node("MatMul", {"p", "v"}, {"out"});
                 },
                 with(fused, {{"Dropout", 0}, {"Cast", 0}, {"Expand", 0}, {"Slice", 0}}),
                 qkv_names});
  all.push_back({"attention_no_op_dropout_whose_mask_is_read",
                 [](OnnxBuilder& b) {
                   qkv(b);
                   b.node("MatMul", {"q", "kt"}, {"s"});
                   b.node("Softmax", {"s"}, {"p0"});
                   training_dropout(b, "p0", "p", 0.0f, "kept");
                   b.node("MatMul", {"p", "v"}, {"attention"});
                   OnnxBuilder::attr(b.node("Cast", {"kept"}, {"kept_f"}), "to", int64_t{1});
                   b.node("ReduceSum", {"kept_f"}, {"count"});
                   b.node("Mul", {"attention", "count"}, {"out"});
                 },
                 with(unfused, {{"Dropout", 1}}), qkv_names});
  all.push_back({"attention_keys_broadcast_over_heads",
                 [](OnnxBuilder& b) {
                   qkv(b, {1, 1, 3, 5});
                   b.node("MatMul", {"q", "kt"}, {"s"});
                   softmax_times_v(b, "s");
                 },
                 unfused, qkv_names});
  all.push_back({"attention_mask_is_trained",
                 [](OnnxBuilder& b) {
                   qkv(b);
                   param(b, "bias", {5, 5}, 10);
                   b.node("MatMul", {"q", "kt"}, {"s"});
                   b.node("Add", {"s", "bias"}, {"masked"});
                   softmax_times_v(b, "masked");
                 },
                 unfused,
                 {"q", "kt", "v", "bias"}});
  return all;
}

std::vector<FusionCase> layer_norm_cases() {
  const std::vector<std::string> params = {"x", "gamma", "beta"};
  std::vector<FusionCase> all;
  all.push_back({"layer_norm_pow_scale_bias",
                 [](OnnxBuilder& b) {
                   centered_x(b);
                   scalar(b, "two", 2.0f);
                   b.node("Pow", {"d", "two"}, {"sq"});
                   normalized(b, "sq");
                   b.node("Mul", {"n", "gamma"}, {"scaled"});
                   b.node("Add", {"scaled", "beta"}, {"out"});
                 },
                 {{"LayerNormalization", 1}, {"ReduceMean", 0}, {"Sqrt", 0}},
                 params});
  all.push_back({"layer_norm_mul_square_operands_swapped",
                 [](OnnxBuilder& b) {
                   centered_x(b);
                   b.node("Mul", {"d", "d"}, {"sq"});
                   normalized(b, "sq");
                   b.node("Mul", {"gamma", "n"}, {"scaled"});
                   b.node("Add", {"beta", "scaled"}, {"out"});
                 },
                 {{"LayerNormalization", 1}, {"ReduceMean", 0}},
                 params});
  all.push_back({"layer_norm_without_affine",
                 [](OnnxBuilder& b) {
                   centered_x(b);
                   b.node("Mul", {"d", "d"}, {"sq"});
                   normalized(b, "sq");
                   b.node("Identity", {"n"}, {"out"});
                 },
                 {{"LayerNormalization", 1}, {"Div", 0}},
                 {"x"}});
  all.push_back({"layer_norm_two_trailing_axes",
                 [](OnnxBuilder& b) {
                   centered_x(b, {2, 3, 4}, {-1, 1});
                   b.node("Mul", {"d", "d"}, {"sq"});
                   normalized(b, "sq", {1, 2});
                   b.node("Mul", {"n", "gamma"}, {"scaled"});
                   b.node("Add", {"scaled", "beta"}, {"out"});
                 },
                 {{"LayerNormalization", 1}, {"ReduceMean", 0}},
                 params});
  all.push_back({"layer_norm_over_a_middle_axis",
                 [](OnnxBuilder& b) {
                   centered_x(b, {2, 3, 4}, {1});
                   b.node("Mul", {"d", "d"}, {"sq"});
                   normalized(b, "sq", {1});
                   b.node("Identity", {"n"}, {"out"});
                 },
                 {{"LayerNormalization", 0}, {"ReduceMean", 2}},
                 {"x"}});
  all.push_back({"layer_norm_centered_read_twice",
                 [](OnnxBuilder& b) {
                   centered_x(b);
                   b.node("Mul", {"d", "d"}, {"sq"});
                   normalized(b, "sq");
                   b.node("Add", {"n", "d"}, {"out"});
                 },
                 {{"LayerNormalization", 0}, {"ReduceMean", 2}},
                 {"x"}});
  all.push_back({"layer_norm_scale_per_row_stays_outside",
                 [](OnnxBuilder& b) {
                   centered_x(b);
                   param(b, "row_scale", {3, 1}, 11);
                   b.node("Mul", {"d", "d"}, {"sq"});
                   normalized(b, "sq");
                   b.node("Mul", {"n", "row_scale"}, {"out"});
                 },
                 {{"LayerNormalization", 1}, {"ReduceMean", 0}, {"Mul", 1}},
                 {"x", "row_scale"}});
  return all;
}

std::vector<FusionCase> gelu_cases() {
  const std::vector<std::string> params = {"x", "bias"};
  std::vector<FusionCase> all;
  all.push_back({"gelu_erf_div_with_bias",  // PyTorch's F.gelu after a Linear
                 [](OnnxBuilder& b) {
                   biased(b);
                   scalar(b, "root2", 1.41421356f);
                   b.node("Div", {"h", "root2"}, {"scaled"});
                   erf_tail(b, "scaled");
                 },
                 {{"piper.BiasGelu", 1}, {"Erf", 0}, {"Add", 0}},
                 params});
  all.push_back({"gelu_erf_mul_without_bias",
                 [](OnnxBuilder& b) {
                   param(b, "h", {4, 6}, 12);
                   scalar(b, "inv_root2", 0.70710678f);
                   b.node("Mul", {"inv_root2", "h"}, {"scaled"});
                   erf_tail(b, "scaled");
                 },
                 {{"piper.BiasGelu", 1}, {"Erf", 0}},
                 {"h"}});
  all.push_back({"gelu_tanh_pow_with_bias",
                 [](OnnxBuilder& b) {
                   biased(b);
                   scalar(b, "three", 3.0f);
                   b.node("Pow", {"h", "three"}, {"cube"});
                   tanh_tail(b, "cube");
                 },
                 {{"piper.BiasGelu", 1}, {"Tanh", 0}, {"Pow", 0}, {"Add", 0}},
                 params});
  all.push_back({"gelu_tanh_products_with_bias",  // PyTorch's gelu(approximate="tanh")
                 [](OnnxBuilder& b) {
                   biased(b);
                   b.node("Mul", {"h", "h"}, {"square"});
                   b.node("Mul", {"h", "square"}, {"cube"});
                   tanh_tail(b, "cube");
                 },
                 {{"piper.BiasGelu", 1}, {"Tanh", 0}, {"Add", 0}},
                 params});
  all.push_back({"gelu_biased_input_read_twice_keeps_the_add",
                 [](OnnxBuilder& b) {
                   biased(b);
                   scalar(b, "root2", 1.41421356f);
                   b.node("Div", {"h", "root2"}, {"scaled"});
                   erf_tail(b, "scaled", "gelu");
                   b.node("Sub", {"gelu", "h"}, {"out"});
                 },
                 {{"piper.BiasGelu", 1}, {"Erf", 0}, {"Add", 1}},
                 params});
  all.push_back({"gelu_other_constant",
                 [](OnnxBuilder& b) {
                   biased(b);
                   scalar(b, "root2", 1.41421356f);
                   b.node("Div", {"h", "root2"}, {"scaled"});
                   erf_tail(b, "scaled", "out", 0.6f);
                 },
                 {{"piper.BiasGelu", 0}, {"Erf", 1}},
                 params});
  return all;
}

// Trained X [2, 3, 8] and W [5, 8] (a Linear layer's weight, [out, in]); "wt" = Wᵀ.
void linear_input(OnnxBuilder& b) {
  param(b, "x", {2, 3, 8}, 13);
  param(b, "w", {5, 8}, 14);
  b.node("Transpose", {"w"}, {"wt"});
}

std::vector<FusionCase> linear_cases() {
  std::vector<FusionCase> all;
  const std::vector<std::string> params = {"x", "w", "bias"};
  all.push_back({"linear_with_bias",  // PyTorch's Linear on a 3-D input
                 [](OnnxBuilder& b) {
                   linear_input(b);
                   param(b, "bias", {5}, 15);
                   b.node("MatMul", {"x", "wt"}, {"y"});
                   b.node("Add", {"bias", "y"}, {"out"});
                 },
                 {{"piper.MatMul", 1}, {"MatMul", 0}, {"Transpose", 0}, {"Add", 0}},
                 params});
  all.push_back({"linear_without_bias",
                 [](OnnxBuilder& b) {
                   linear_input(b);
                   b.node("MatMul", {"x", "wt"}, {"out"});
                 },
                 {{"piper.MatMul", 1}, {"MatMul", 0}, {"Transpose", 0}},
                 {"x", "w"}});
  all.push_back({"matmul_plus_bias_untransposed",
                 [](OnnxBuilder& b) {
                   param(b, "x", {4, 6}, 16);
                   param(b, "w", {6, 3}, 17);
                   param(b, "bias", {3}, 18);
                   b.node("MatMul", {"x", "w"}, {"y"});
                   b.node("Add", {"y", "bias"}, {"out"});
                 },
                 {{"piper.MatMul", 1}, {"MatMul", 0}, {"Add", 0}},
                 params});
  all.push_back({"linear_product_read_twice_keeps_the_add",
                 [](OnnxBuilder& b) {
                   linear_input(b);
                   param(b, "bias", {5}, 15);
                   b.node("MatMul", {"x", "wt"}, {"y"});
                   b.node("Add", {"y", "bias"}, {"z"});
                   b.node("Mul", {"z", "y"}, {"out"});
                 },
                 {{"piper.MatMul", 1}, {"MatMul", 0}, {"Transpose", 0}, {"Add", 1}},
                 params});
  // A Linear layer then GELU: the tanh approximation goes into the product (its epilogue),
  // the exact GELU stays piper.BiasGelu with the bias.
  const auto linear_gelu = [](bool with_bias, bool tanh) {
    return [with_bias, tanh](OnnxBuilder& b) {
      linear_input(b);
      if (with_bias) {
        param(b, "bias", {5}, 15);
        b.node("MatMul", {"x", "wt"}, {"y"});
        b.node("Add", {"y", "bias"}, {"h"});
      } else {
        b.node("MatMul", {"x", "wt"}, {"h"});
      }
      if (!tanh) {
        scalar(b, "root2", 1.41421356f);
        b.node("Div", {"h", "root2"}, {"scaled"});
        erf_tail(b, "scaled");
        return;
      }
      b.node("Mul", {"h", "h"}, {"square"});
      b.node("Mul", {"h", "square"}, {"cube"});
      tanh_tail(b, "cube");
    };
  };
  const std::map<std::string, int> into_product = {
      {"piper.MatMul", 1}, {"piper.BiasGelu", 0}, {"Tanh", 0}, {"MatMul", 0}, {"Add", 0}};
  all.push_back({"linear_tanh_gelu", linear_gelu(true, true), into_product, params});
  all.push_back(
      {"linear_without_bias_tanh_gelu", linear_gelu(false, true), into_product, {"x", "w"}});
  all.push_back({"linear_erf_gelu_stays_bias_gelu",
                 linear_gelu(true, false),
                 {{"piper.MatMul", 1}, {"piper.BiasGelu", 1}, {"Erf", 0}},
                 params});
  all.push_back({"matmul_with_row_vector_sum_is_not_a_bias",
                 [](OnnxBuilder& b) {
                   param(b, "x", {4, 6}, 16);
                   param(b, "w", {6, 3}, 17);
                   param(b, "bias", {4, 1}, 18);
                   b.node("MatMul", {"x", "w"}, {"y"});
                   b.node("Add", {"y", "bias"}, {"out"});
                 },
                 {{"piper.MatMul", 0}, {"MatMul", 1}, {"Add", 1}},
                 params});
  return all;
}

// What fusion's simplifications remove (exporters' no-ops, scalars computed from constants)
// and what they must keep.
std::vector<FusionCase> simplify_cases() {
  std::vector<FusionCase> all;
  all.push_back(
      {"no_ops_removed",
       [](OnnxBuilder& b) {
         param(b, "x", {2, 3}, 20);
         OnnxBuilder::attr(b.node("Cast", {"x"}, {"a"}), "to", int64_t{1});
         b.node("Identity", {"a"}, {"b"});
         b.node("Dropout", {"b"}, {"c"});  // inference mode
         b.int_initializer("same_shape", {2}, {2, 3});
         b.node("Reshape", {"c", "same_shape"}, {"d"});
         slice(b, "d", "e", 1, 0, 3);
         b.node("Expand", {"e", "same_shape"}, {"f"});
         training_dropout(b, "f", "out", 0.0f);
       },
       {{"Cast", 0}, {"Identity", 0}, {"Dropout", 0}, {"Reshape", 0}, {"Slice", 0}, {"Expand", 0}},
       {"x"}});
  all.push_back({"reversing_slice_stays",
                 [](OnnxBuilder& b) {
                   param(b, "x", {2, 3}, 21);
                   slice(b, "x", "out", 1, -1, -4, -1);
                 },
                 {{"Slice", 1}},
                 {"x"}});
  all.push_back({"scalar_constants_fold",  // GPT-2's scale: size(-1) ** 0.5
                 [](OnnxBuilder& b) {
                   param(b, "x", {2, 3}, 22);
                   scalar(b, "sixteen", 16.0f);
                   scalar(b, "half", 0.5f);
                   scalar(b, "zero", 0.0f);
                   b.node("Pow", {"sixteen", "half"}, {"four"});
                   b.node("Add", {"zero", "four"}, {"still_four"});
                   b.node("Sqrt", {"still_four"}, {"two"});
                   b.node("Div", {"x", "two"}, {"out"});
                 },
                 {{"Pow", 0}, {"Add", 0}, {"Sqrt", 0}, {"Div", 1}},
                 {"x"}});
  return all;
}

std::vector<FusionCase> cases() {
  std::vector<FusionCase> all = attention_cases();
  for (auto& c : simplify_cases()) all.push_back(std::move(c));
  for (auto& c : layer_norm_cases()) all.push_back(std::move(c));
  for (auto& c : gelu_cases()) all.push_back(std::move(c));
  for (auto& c : linear_cases()) all.push_back(std::move(c));
  return all;
}

INSTANTIATE_TEST_SUITE_P(Patterns, FusionRules, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace piper
