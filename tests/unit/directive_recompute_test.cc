#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "directive_fixture.h"
#include "engine/runtime/session.h"
#include "formats/atomic_file.h"
#include "formats/error.h"
#include "planner/annotate.h"
#include "planner/ir/text.h"
#include "planner/lower/lower.h"
#include "planner/plan_model.h"

namespace piper {
namespace {

using testing::apply_directives;
using testing::OnnxBuilder;

std::vector<float> Values(size_t count, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  std::vector<float> values(count);
  for (float& v : values) v = uniform(generator);
  return values;
}

void AddDropoutConstants(OnnxBuilder& b, const std::string& scope) {
  OnnxBuilder::attr(b.node("Constant", {}, {"ratio"}, scope + "ratio"), "value_float", 0.25f);
  auto& training = b.node("Constant", {}, {"training"}, scope + "training");
  auto* attr = training.add_attribute();
  attr->set_name("value");
  attr->set_type(onnx::AttributeProto::TENSOR);
  attr->mutable_t()->set_data_type(onnx::TensorProto::BOOL);
  attr->mutable_t()->add_int32_data(1);
}

// Three layers tagged LAYER 0, 1, 2: layer l is Gemm -> Tanh -> Gemm, layer 1
// with a Dropout after its Tanh, layer 2 the head Gemm and the loss. Inside
// layers 0 and 1 the Tanh output is what the backward needs.
ir::TaskGraph LayeredTaskGraph(int64_t batch) {
  OnnxBuilder b;
  b.input("x", {-1, 4}).input("y", {-1}, onnx::TensorProto::INT64).output("loss", {});
  b.initializer("a0", {8, 4}, Values(32, 1)).initializer("b0", {8, 8}, Values(64, 2));
  b.initializer("a1", {8, 8}, Values(64, 3)).initializer("b1", {8, 8}, Values(64, 4));
  b.initializer("w2", {3, 8}, Values(24, 5));
  AddDropoutConstants(b, "/l1/");
  const auto gemm = [&](const std::string& in, const std::string& w, const std::string& out,
                        const std::string& name) {
    OnnxBuilder::attr(b.node("Gemm", {in, w}, {out}, name), "transB", int64_t{1});
  };
  gemm("x", "a0", "u0", "/l0/a/Gemm");
  b.node("Tanh", {"u0"}, {"t0"}, "/l0/Tanh");
  gemm("t0", "b0", "h0", "/l0/b/Gemm");
  gemm("h0", "a1", "u1", "/l1/a/Gemm");
  b.node("Tanh", {"u1"}, {"t1"}, "/l1/Tanh");
  b.node("Dropout", {"t1", "ratio", "training"}, {"d1"}, "/l1/Dropout");
  gemm("d1", "b1", "h1", "/l1/b/Gemm");
  gemm("h1", "w2", "z", "/l2/Gemm");
  b.node("SoftmaxCrossEntropyLoss", {"z", "y"}, {"loss"}, "/loss");
  ir::OpGraph graph = planner::import_model(b.model(), {.batch = batch}, "layered.onnx");
  const auto strategy = strategy::parse_strategy(R"({"batch": {"global": 8},
      "optimizer": {"type": "adamw"},
      "annotations": [{"match": "/l0/*", "tags": {"LAYER": 0}},
                      {"match": "/l1/*", "tags": {"LAYER": 1}},
                      {"match": "/l2/*", "tags": {"LAYER": 2}}]})",
                                                 "test.json");
  planner::annotate(graph, strategy.annotations, strategy.source);
  planner::differentiate(graph);
  planner::add_optimizer(graph, strategy.optimizer);
  return ir::build_task_graph(std::move(graph));
}

bool IsRecompute(const ir::TaskGraph& graph, const ir::Task& task) {
  return task.kind == ir::TaskKind::kCompute && !task.ops.empty() &&
         graph.op_graph().op(task.ops.front()).name.ends_with("/recomputed");
}

// The task of `pass` with LAYER `layer` in microbatch `mb` (recompute tasks
// apart, unless `recompute`).
ir::TaskId Find(const ir::TaskGraph& graph, ir::Pass pass, int64_t layer, int mb,
                bool recompute = false) {
  std::vector<ir::TaskId> found;
  for (ir::TaskId id = 0; id < graph.num_tasks(); ++id) {
    const ir::Task& task = graph.task(id);
    const auto tag = task.tags.find("LAYER");
    if (task.kind == ir::TaskKind::kCompute && task.pass == pass && task.microbatch == mb &&
        tag != task.tags.end() && tag->second == layer && IsRecompute(graph, task) == recompute) {
      found.push_back(id);
    }
  }
  EXPECT_EQ(found.size(), 1u) << ir::to_string(pass) << " LAYER " << layer << " mb " << mb;
  return found.empty() ? -1 : found.front();
}

bool HasEdge(const ir::TaskGraph& graph, ir::TaskId from, ir::TaskId to, ir::EdgeKind kind) {
  for (const ir::Edge& edge : graph.edges()) {
    if (edge.from == from && edge.to == to && edge.kind == kind) return true;
  }
  return false;
}

std::set<ir::TensorId> Reads(const ir::TaskGraph& graph, ir::TaskId id) {
  std::set<ir::TensorId> reads;
  for (ir::OpId op : graph.task(id).ops) {
    for (ir::TensorId input : graph.op_graph().op(op).inputs) {
      if (input >= 0) reads.insert(input);
    }
  }
  return reads;
}

TEST(RecomputeDirective, AddsABackwardRecomputeTaskPerLayerAndMicrobatch) {
  ir::TaskGraph graph = LayeredTaskGraph(2);
  apply_directives(graph, R"([{"op": "split", "dim_name": "MB", "num_microbatches": 2},
      {"op": "recompute", "filter": {"LAYER": "*", "PASS": "F"}}])");
  for (int mb = 0; mb < 2; ++mb) {
    for (int64_t layer = 0; layer < 2; ++layer) {
      const ir::TaskId forward = Find(graph, ir::Pass::kForward, layer, mb);
      const ir::TaskId recompute = Find(graph, ir::Pass::kBackward, layer, mb, true);
      const ir::Task& task = graph.task(recompute);
      EXPECT_EQ(task.tags, graph.task(forward).tags);
      EXPECT_EQ(task.devices, graph.task(forward).devices);
      EXPECT_EQ(task.stream, graph.task(forward).stream);
      // Only the ops up to the Tanh (and the Dropout) are cloned, not the second Gemm.
      EXPECT_EQ(task.ops.size(), layer == 0 ? 2u : 3u);
    }
  }
  // The microbatches share the cloned ops.
  EXPECT_EQ(graph.task(Find(graph, ir::Pass::kBackward, 1, 0, true)).ops,
            graph.task(Find(graph, ir::Pass::kBackward, 1, 1, true)).ops);
  // The copies have names of their own: the text form reads back the same.
  const std::string text = ir::print(graph);
  EXPECT_EQ(ir::print(ir::parse(text)), text);
}

TEST(RecomputeDirective, BackwardReadsTheRecomputedTensorsOnly) {
  ir::TaskGraph graph = LayeredTaskGraph(2);
  apply_directives(graph, R"([{"op": "split", "dim_name": "MB", "num_microbatches": 2},
      {"op": "recompute", "filter": {"LAYER": "*"}}])");
  const ir::OpGraph& ops = graph.op_graph();
  for (int64_t layer = 0; layer < 2; ++layer) {
    const ir::TaskId forward = Find(graph, ir::Pass::kForward, layer, 1);
    const ir::TaskId backward = Find(graph, ir::Pass::kBackward, layer, 1);
    const ir::TaskId recompute = Find(graph, ir::Pass::kBackward, layer, 1, true);
    int recomputed = 0;
    for (ir::TensorId tensor : Reads(graph, backward)) {
      const std::string& name = ops.tensor(tensor).name;
      const ir::OpId producer = ops.producer(tensor);
      const auto& forward_ops = graph.task(forward).ops;
      if (std::find(forward_ops.begin(), forward_ops.end(), producer) != forward_ops.end()) {
        // What F writes and the backward still reads: the layer's output,
        // which the next layer reads too, or a Dropout mask.
        EXPECT_TRUE(name == "h0" || name.find("mask") != std::string::npos)
            << "LAYER " << layer << " backward reads '" << name << "' of the forward";
      }
      if (name.ends_with("/recomputed")) {
        ++recomputed;
        const auto& recompute_ops = graph.task(recompute).ops;
        EXPECT_NE(std::find(recompute_ops.begin(), recompute_ops.end(), producer),
                  recompute_ops.end())
            << name;
      }
    }
    EXPECT_GE(recomputed, 1) << "LAYER " << layer;
    EXPECT_TRUE(HasEdge(graph, recompute, backward, ir::EdgeKind::kData));
  }
}

TEST(RecomputeDirective, RunsAfterTheOtherInputsOfItsBackward) {
  ir::TaskGraph graph = LayeredTaskGraph(2);
  apply_directives(graph, R"([{"op": "split", "dim_name": "MB", "num_microbatches": 2},
      {"op": "recompute", "filter": {"LAYER": "*"}}])");
  const std::vector<ir::TaskId> order = graph.topological_order();
  const auto position = [&](ir::TaskId id) {
    return std::find(order.begin(), order.end(), id) - order.begin();
  };
  for (int mb = 0; mb < 2; ++mb) {
    // R of layer 0 waits for the backward of layer 1, whose gradient its backward reads.
    const ir::TaskId recompute = Find(graph, ir::Pass::kBackward, 0, mb, true);
    const ir::TaskId next = Find(graph, ir::Pass::kBackward, 1, mb);
    EXPECT_TRUE(HasEdge(graph, next, recompute, ir::EdgeKind::kWindow)) << "mb " << mb;
    EXPECT_LT(position(next), position(recompute));
    EXPECT_LT(position(recompute), position(Find(graph, ir::Pass::kBackward, 0, mb)));
    // ... and therefore every forward of its microbatch.
    for (int64_t layer = 0; layer < 3; ++layer) {
      EXPECT_LT(position(Find(graph, ir::Pass::kForward, layer, mb)), position(recompute));
    }
  }
}

TEST(RecomputeDirective, DropoutIsRebuiltFromTheSavedMask) {
  ir::TaskGraph graph = LayeredTaskGraph(2);
  apply_directives(graph, R"([{"op": "recompute", "filter": {"LAYER": 1}}])");
  const ir::OpGraph& ops = graph.op_graph();
  const ir::TaskId forward = Find(graph, ir::Pass::kForward, 1, 0);
  const ir::TaskId recompute = Find(graph, ir::Pass::kBackward, 1, 0, true);
  ir::TensorId mask = -1;
  for (ir::OpId op : graph.task(forward).ops) {
    if (ops.op(op).type == "Dropout") mask = ops.op(op).outputs.at(1);
  }
  ASSERT_GE(mask, 0);
  int replays = 0;
  for (ir::OpId op : graph.task(recompute).ops) {
    EXPECT_NE(ops.op(op).type, "Dropout");
    if (ops.op(op).type != "piper.DropoutGrad") continue;
    ++replays;
    EXPECT_EQ(ops.op(op).inputs.at(1), mask);
    EXPECT_EQ(ops.tensor(ops.op(op).outputs.at(0)).name, "d1/recomputed");
  }
  EXPECT_EQ(replays, 1);
  EXPECT_TRUE(HasEdge(graph, forward, recompute, ir::EdgeKind::kData));
  // Only LAYER 1 was selected.
  int recompute_tasks = 0;
  for (const ir::Task& task : graph.tasks()) recompute_tasks += IsRecompute(graph, task);
  EXPECT_EQ(recompute_tasks, 1);
}

TEST(RecomputeDirective, ZeroThreeGathersParametersAgainForRecomputeInEitherOrder) {
  for (const bool recompute_first : {false, true}) {
    SCOPED_TRACE(recompute_first ? "recompute, then zero 3" : "zero 3, then recompute");
    ir::TaskGraph graph = LayeredTaskGraph(1);
    const std::string recompute = R"({"op": "recompute", "filter": {"LAYER": "*"}})";
    const std::string zero = R"({"op": "zero", "stage": 3, "devices": [0, 1]})";
    apply_directives(
        graph, R"([{"op": "split", "dim_name": "MB", "num_microbatches": 2}, )" +
                   (recompute_first ? recompute + ", " + zero : zero + ", " + recompute) + "]");
    const ir::OpGraph& ops = graph.op_graph();
    for (int mb = 0; mb < 2; ++mb) {
      for (int64_t layer = 0; layer < 2; ++layer) {
        const ir::TaskId id = Find(graph, ir::Pass::kBackward, layer, mb, true);
        EXPECT_EQ(graph.task(id).devices, (std::vector<int>{0, 1}));
        // R reads its layer's first weight through an all-gather of its own.
        std::vector<ir::TaskId> gathers;
        for (const ir::Edge& edge : graph.edges()) {
          if (edge.to == id && edge.kind == ir::EdgeKind::kData &&
              graph.task(edge.from).kind == ir::TaskKind::kAllGather) {
            gathers.push_back(edge.from);
          }
        }
        ASSERT_EQ(gathers.size(), 1u) << "LAYER " << layer << " mb " << mb;
        const ir::Task& gather = graph.task(gathers[0]);
        ASSERT_EQ(gather.tensors.size(), 2u);
        EXPECT_EQ(ops.tensor(gather.tensors[0]).role, ir::Role::kParameter);
        for (const ir::Task& other : graph.tasks()) {
          if (&other != &gather && other.kind == ir::TaskKind::kAllGather &&
              other.microbatch == mb) {
            EXPECT_NE(other.tensors, gather.tensors) << "the forward's gather is reused";
          }
        }
      }
    }
  }
}

TEST(RecomputeDirective, FilterSelectingNoForwardTaskIsAnError) {
  ir::TaskGraph graph = LayeredTaskGraph(2);
  try {
    apply_directives(graph, R"([{"op": "recompute", "filter": {"LAYER": 7}}])");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("$.directives[0].filter (recompute)"),
              std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("no forward task"), std::string::npos) << error.what();
  }
}

TEST(RecomputeDirective, SomeMicrobatchesOnlyIsAnError) {
  ir::TaskGraph graph = LayeredTaskGraph(2);
  try {
    apply_directives(graph, R"([{"op": "split", "dim_name": "MB", "num_microbatches": 2},
        {"op": "recompute", "filter": {"LAYER": 0, "MB": 0}}])");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("every microbatch"), std::string::npos)
        << error.what();
  }
}

TEST(RecomputeDirective, SplitAfterRecomputeClonesTheRecomputeTasks) {
  ir::TaskGraph graph = LayeredTaskGraph(2);
  apply_directives(graph, R"([{"op": "recompute", "filter": {"LAYER": "*"}},
      {"op": "split", "dim_name": "MB", "num_microbatches": 2}])");
  for (int mb = 0; mb < 2; ++mb) {
    const ir::TaskId recompute = Find(graph, ir::Pass::kBackward, 0, mb, true);
    EXPECT_TRUE(
        HasEdge(graph, Find(graph, ir::Pass::kBackward, 1, mb), recompute, ir::EdgeKind::kWindow));
  }
}

// An `order` written before or after recompute places R with the backward
// it feeds: filters naming PASS B (or BI, which splits the backward) select
// R too, and PASS F never does.
TEST(RecomputeDirective, ComposesWithOrder) {
  const std::string split = R"({"op": "split", "dim_name": "MB", "num_microbatches": 2})";
  const std::string recompute = R"({"op": "recompute", "filter": {"LAYER": "*"}})";
  for (const std::string backward : {"B", "BI"}) {
    const std::string order = R"({"op": "order", "filters": [[{"MB": 0, "PASS": "F"}],
        [{"MB": 0, "PASS": ")" +
                              backward + R"("}], [{"MB": 1, "PASS": "F"}],
        [{"MB": 1, "PASS": ")" +
                              backward + R"("}]]})";
    for (const bool recompute_first : {false, true}) {
      SCOPED_TRACE(backward +
                   (recompute_first ? ", recompute then order" : ", order then recompute"));
      ir::TaskGraph graph = LayeredTaskGraph(2);
      apply_directives(
          graph, "[" + split + ", " +
                     (recompute_first ? recompute + ", " + order : order + ", " + recompute) + "]");
      const std::vector<ir::TaskId> topological = graph.topological_order();
      // Every recompute task of microbatch 0 runs before every forward of microbatch 1.
      int recompute_tasks = 0;
      std::vector<size_t> recompute_mb0;
      size_t first_forward_mb1 = topological.size();
      for (size_t i = 0; i < topological.size(); ++i) {
        const ir::Task& task = graph.task(topological[i]);
        if (IsRecompute(graph, task)) {
          ++recompute_tasks;
          EXPECT_NE(task.pass, ir::Pass::kForward);
          if (task.microbatch == 0) recompute_mb0.push_back(i);
        } else if (task.kind == ir::TaskKind::kCompute && task.pass == ir::Pass::kForward &&
                   task.microbatch == 1) {
          first_forward_mb1 = std::min(first_forward_mb1, i);
        }
      }
      EXPECT_GE(recompute_tasks, 4);
      // (This model's input needs no gradient, so the backward split finds no
      // BI work: its BI groups are empty and only verify() speaks for them.)
      if (backward != "B") continue;
      for (size_t i : recompute_mb0) EXPECT_LT(i, first_forward_mb1);
    }
  }
}

// The rank-0 plan of a model under a strategy given as JSON text.
plan::Plan PlanModel(const std::string& model_path, const std::string& strategy_text) {
  const auto strategy = strategy::parse_strategy(strategy_text, "test.json");
  return planner::plan_model(model_path, strategy).plans.at(0);
}

// samples/gpt with a LAYER tag per block: recomputing every block lowers the
// planned activation peak.
TEST(RecomputeDirective, LowersThePlannedActivationPeakOfGpt) {
  const std::string model = std::string(PIPER_SOURCE_DIR) + "/samples/gpt/model.onnx";
  const std::string head = R"({"batch": {"global": 8}, "optimizer": {"type": "adamw"},
      "frozen": ["*mask*"],
      "annotations": [{"match": "/blocks.0/*", "tags": {"LAYER": 0}},
                      {"match": "/blocks.1/*", "tags": {"LAYER": 1}}], "directives": )";
  const auto plain = PlanModel(model, head + "[]}");
  const auto recomputed =
      PlanModel(model, head + R"([{"op": "recompute", "filter": {"LAYER": "*"}}]})");
  const auto split =
      PlanModel(model, head + R"([{"op": "split", "dim_name": "MB", "num_microbatches": 2}]})");
  const auto split_recomputed =
      PlanModel(model, head + R"([{"op": "split", "dim_name": "MB", "num_microbatches": 2},
                                  {"op": "recompute", "filter": {"LAYER": "*"}}]})");
  std::cout << "gpt activation peak: " << plain.memory().activation_bytes() << " B, recompute "
            << recomputed.memory().activation_bytes() << " B; 2 microbatches "
            << split.memory().activation_bytes() << " B, recompute "
            << split_recomputed.memory().activation_bytes() << " B\n";
  EXPECT_LT(recomputed.memory().activation_bytes(), plain.memory().activation_bytes());
  EXPECT_LT(split_recomputed.memory().activation_bytes(), split.memory().activation_bytes());
}

// A step with recompute computes the gradients of the step without: the
// recomputed Dropout output is the forward's, mask and all.
TEST(RecomputeDirective, DropoutGradientsEqualThoseWithoutRecompute) {
  OnnxBuilder b;
  b.initializer("a", {8, 16}, Values(128, 7));
  b.initializer("w", {16, 16}, Values(256, 8));
  b.initializer("r", {8, 16}, Values(128, 9));
  AddDropoutConstants(b, "/");
  b.node("Tanh", {"a"}, {"t"}, "/Tanh");
  b.node("Dropout", {"t", "ratio", "training"}, {"d"}, "/Dropout");
  b.node("MatMul", {"d", "w"}, {"m"}, "/MatMul");
  b.node("Mul", {"m", "r"}, {"weighted"}, "/Mul");
  OnnxBuilder::attr(b.node("ReduceSum", {"weighted"}, {"loss"}, "/ReduceSum"), "keepdims",
                    int64_t{0});
  b.output("loss", {});
  const auto dir = std::filesystem::temp_directory_path() /
                   ("piper_recompute_dropout_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string model_path = (dir / "model.onnx").string();
  formats::write_file_atomically(model_path, b.model().SerializeAsString());
  const std::string head =
      R"({"batch": {"global": 1}, "optimizer": {"type": "sgd", "lr": 0.0001}, "frozen": ["r"],
          "directives": )";
  const auto step = [&](const plan::Plan& plan) {
    engine::Session session(plan, engine::make_backend("cpu"), {11});
    session.step({});
    return std::make_pair(session.read_floats("grad/a"), session.read_floats("grad/w"));
  };
  const plan::Plan plain = PlanModel(model_path, head + "[]}");
  const plan::Plan recomputed =
      PlanModel(model_path, head + R"([{"op": "recompute", "filter": {}}]})");
  int replays = 0;
  for (const auto& stream : recomputed.streams()) {
    for (const auto& instruction : stream.instructions()) {
      replays += instruction.has_kernel() &&
                 instruction.kernel().op_type() == "piper.DropoutGrad" &&
                 instruction.label().ends_with("/recomputed");
    }
  }
  EXPECT_EQ(replays, 1);
  const auto [grad_a, grad_w] = step(plain);
  const auto [recomputed_a, recomputed_w] = step(recomputed);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(grad_a, recomputed_a);
  EXPECT_EQ(grad_w, recomputed_w);
  // The mask dropped something: a wrong mask would show.
  EXPECT_GT(std::count(grad_a.begin(), grad_a.end(), 0.0f), 0);
}

}  // namespace
}  // namespace piper
