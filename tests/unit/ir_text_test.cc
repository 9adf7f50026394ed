#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "planner/ir/text.h"

namespace piper::ir {
namespace {

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

Tensor make_tensor(std::string name, DType dtype, Shape shape, Role role,
                   std::string initializer = "", std::vector<uint8_t> data = {},
                   int64_t int_high = 0) {
  return {std::move(name),        dtype,           std::move(shape), role,
          std::move(initializer), std::move(data), int_high};
}

// A graph that uses every field the text form covers, with names and values
// chosen to need quoting, escaping and exact float printing.
TaskGraph graph_with_every_feature() {
  OpGraph ops;
  const TensorId x =
      ops.add_tensor(make_tensor("x", DType::kFloat32, {4, 8}, Role::kInput, "", {}, 0));
  const TensorId ids =
      ops.add_tensor(make_tensor("ids", DType::kInt64, {4}, Role::kInput, "", {}, 1000));
  const TensorId w = ops.add_tensor(
      make_tensor("onnx::Gemm_5", DType::kFloat32, {8, 16}, Role::kParameter, "fc1.weight"));
  const TensorId h =
      ops.add_tensor(make_tensor("h out", DType::kFloat32, {4, 16}, Role::kActivation));
  const TensorId l = ops.add_tensor(make_tensor("_", DType::kFloat32, {}, Role::kLoss));
  const TensorId dw = ops.add_tensor(make_tensor("dw", DType::kFloat32, {8, 16}, Role::kGradient));
  const TensorId m =
      ops.add_tensor(make_tensor("m", DType::kFloat32, {8, 16}, Role::kOptimizerState));
  const TensorId v =
      ops.add_tensor(make_tensor("", DType::kFloat32, {8, 16}, Role::kOptimizerState));
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  const TensorId scale = ops.add_tensor(make_tensor("scale", DType::kFloat32, {3}, Role::kConstant,
                                                    "", bytes_of<float>({0.1f, -2, 1e30f})));
  const TensorId nan = ops.add_tensor(
      make_tensor("nan", DType::kFloat32, {2}, Role::kConstant, "", bytes_of<float>({kNan, 1})));
  const TensorId axes = ops.add_tensor(make_tensor("axes", DType::kInt64, {2}, Role::kConstant, "",
                                                   bytes_of<int64_t>({-1, 1LL << 40})));
  const TensorId mask =
      ops.add_tensor(make_tensor("mask", DType::kBool, {2, 2}, Role::kConstant, "", {1, 0, 0, 1}));
  const TensorId odd =
      ops.add_tensor(make_tensor("odd", DType::kBool, {3}, Role::kConstant, "", {2, 0}));
  Tensor count = make_tensor("count", DType::kFloat32, {}, Role::kInput);
  count.label_count = {ids, -100};
  ops.add_tensor(std::move(count));
  ops.add_op({"Gemm", "/fc1/Gemm", {x, w, -1}, {h}, {}, Pass::kForward, {{"LAYER", 0}}});
  ops.add_op({"piper.Loss",
              "with \"quotes\"\\ and\nnewline\x01",
              {h, ids, scale, nan, axes, mask, odd},
              {l},
              {{"transB", int64_t{1}},
               {"alpha", 1.0},
               {"epsilon", 1e-5},
               {"max", std::numeric_limits<double>::infinity()},
               {"min", -0.0},
               {"mode", std::string("con\"stant")},
               {"perm", std::vector<int64_t>{1, 0, -7}},
               {"none", std::vector<int64_t>{}},
               {"scales", std::vector<double>{0.5, 2.0, -3e-300}},
               {"no scales", std::vector<double>{}}},
              Pass::kForward,
              {{"LAYER", 1}, {"PP", -2}}});
  ops.add_op({"piper.Grad", "/grad", {l, x}, {dw}, {}, Pass::kBackwardWeight, {}});
  ops.add_op({"piper.Adam", "/adam", {w, dw, m, v}, {-1, m, v}, {}, Pass::kUpdate, {}});
  ops.add_op({"piper.Nop", "", {}, {}, {}, Pass::kBackward, {}});
  ops.add_op({"piper.Nop2", "", {}, {}, {}, Pass::kBackwardInput, {}});
  ops.inputs = {x, ids};
  ops.loss = l;
  ops.loss_seed = scale;
  ops.tensor(dw).accumulated = true;
  ops.trained = {{w, dw, {m, v}}, {scale, -1, {}}};
  ops.grad_norm = l;

  TaskGraph graph(std::move(ops));
  const TaskId a = graph.add_task(
      {TaskKind::kCompute, {{"LAYER", 0}}, Pass::kForward, 0, {0, 1}, {0}, "compute", {}, -1});
  const TaskId send = graph.add_task(
      {TaskKind::kSend, {{"LAYER", 0}}, Pass::kForward, 3, {}, {0}, "p2p", {h, l}, 1});
  const TaskId recv =
      graph.add_task({TaskKind::kRecv, {}, Pass::kForward, 3, {}, {1}, "p2p", {h, l}, 0});
  graph.task(recv).replica = 1;
  const TaskKind collectives[] = {TaskKind::kAllReduce, TaskKind::kReduceScatter,
                                  TaskKind::kAllGather, TaskKind::kAllToAll, TaskKind::kBroadcast};
  for (TaskKind kind : collectives) {
    graph.add_task({kind,
                    {},
                    Pass::kBackward,
                    0,
                    {},
                    {0, 1, 2},
                    "dp stream",
                    {dw},
                    -1,
                    kind != TaskKind::kBroadcast});
  }
  graph.add_task({TaskKind::kCompute, {}, Pass::kUpdate, 0, {3, 99}, {}, "", {}, -1});
  graph.add_edge(a, send, EdgeKind::kData);
  graph.add_edge(send, recv, EdgeKind::kData);
  graph.add_edge(a, 7, EdgeKind::kTemporal);
  graph.add_edge(send, 7, EdgeKind::kWindow);
  graph.add_edge(-1, 12, EdgeKind::kData);
  return graph;
}

void expect_equal(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.dtype, b.dtype) << a.name;
  EXPECT_EQ(a.shape, b.shape) << a.name;
  EXPECT_EQ(a.role, b.role) << a.name;
  EXPECT_EQ(a.initializer, b.initializer) << a.name;
  EXPECT_EQ(a.data, b.data) << a.name;
  EXPECT_EQ(a.int_high, b.int_high) << a.name;
  EXPECT_EQ(a.accumulated, b.accumulated) << a.name;
  EXPECT_EQ(a.label_count, b.label_count) << a.name;
}

void expect_equal(const Op& a, const Op& b) {
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.inputs, b.inputs) << a.name;
  EXPECT_EQ(a.outputs, b.outputs) << a.name;
  EXPECT_EQ(a.attributes, b.attributes) << a.name;
  EXPECT_EQ(a.pass, b.pass) << a.name;
  EXPECT_EQ(a.tags, b.tags) << a.name;
}

void expect_equal(const Task& a, const Task& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.tags, b.tags);
  EXPECT_EQ(a.pass, b.pass);
  EXPECT_EQ(a.microbatch, b.microbatch);
  EXPECT_EQ(a.ops, b.ops);
  EXPECT_EQ(a.devices, b.devices);
  EXPECT_EQ(a.stream, b.stream);
  EXPECT_EQ(a.tensors, b.tensors);
  EXPECT_EQ(a.peer, b.peer);
  EXPECT_EQ(a.average, b.average);
  EXPECT_EQ(a.replica, b.replica);
}

void expect_equal(const TaskGraph& a, const TaskGraph& b) {
  const OpGraph& x = a.op_graph();
  const OpGraph& y = b.op_graph();
  ASSERT_EQ(x.num_tensors(), y.num_tensors());
  for (TensorId id = 0; id < x.num_tensors(); ++id) expect_equal(x.tensor(id), y.tensor(id));
  ASSERT_EQ(x.num_ops(), y.num_ops());
  for (OpId id = 0; id < x.num_ops(); ++id) expect_equal(x.op(id), y.op(id));
  EXPECT_EQ(x.inputs, y.inputs);
  EXPECT_EQ(x.loss, y.loss);
  EXPECT_EQ(x.loss_seed, y.loss_seed);
  EXPECT_EQ(x.grad_norm, y.grad_norm);
  ASSERT_EQ(x.trained.size(), y.trained.size());
  for (size_t i = 0; i < x.trained.size(); ++i) {
    EXPECT_EQ(x.trained[i].parameter, y.trained[i].parameter);
    EXPECT_EQ(x.trained[i].gradient, y.trained[i].gradient);
    EXPECT_EQ(x.trained[i].state, y.trained[i].state);
  }
  ASSERT_EQ(a.num_tasks(), b.num_tasks());
  for (TaskId id = 0; id < a.num_tasks(); ++id) expect_equal(a.task(id), b.task(id));
  ASSERT_EQ(a.edges().size(), b.edges().size());
  for (size_t i = 0; i < a.edges().size(); ++i) {
    EXPECT_EQ(a.edges()[i].from, b.edges()[i].from);
    EXPECT_EQ(a.edges()[i].to, b.edges()[i].to);
    EXPECT_EQ(a.edges()[i].kind, b.edges()[i].kind);
  }
}

TEST(TextTest, RoundTripKeepsEveryFeature) {
  const TaskGraph graph = graph_with_every_feature();
  const std::string text = print(graph);
  const TaskGraph parsed = parse(text);
  EXPECT_EQ(print(parsed), text);
  expect_equal(parsed, graph);
  // -0.0 keeps its sign.
  EXPECT_TRUE(std::signbit(std::get<double>(parsed.op_graph().op(1).attributes.at("min"))));
}

TEST(TextTest, PrintsReadableLines) {
  const std::string text = print(graph_with_every_feature());
  const auto has_line = [&](const std::string& line) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << "missing: " << line << "\n" << text;
  };
  has_line("tensor x f32[4,8] input");
  has_line("grad_norm \"_\"");
  has_line("tensor ids i64[4] input high=1000");
  has_line("tensor count f32[] input counts=(ids, -100)");
  has_line("tensor \"onnx::Gemm_5\" f32[8,16] parameter init=fc1.weight");
  has_line("tensor \"_\" f32[] loss");
  has_line("tensor \"\" f32[8,16] optimizer_state");
  has_line("tensor scale f32[3] constant data=[0.1,-2.0,1e+30]");
  has_line("tensor nan f32[2] constant data=0x0000c07f0000803f");
  has_line("tensor axes i64[2] constant data=[-1,1099511627776]");
  has_line("tensor mask bool[2,2] constant data=[1,0,0,1]");
  has_line("tensor odd bool[3] constant data=0x0200");
  has_line("op 0 Gemm \"/fc1/Gemm\" (x, \"onnx::Gemm_5\", _) -> (\"h out\") pass=F tags={LAYER:0}");
  has_line(
      "op 1 piper.Loss \"with \\\"quotes\\\"\\\\ and\\nnewline\\x01\" (\"h out\", ids, scale, nan, "
      "axes, mask, odd) -> (\"_\") {alpha=1.0, epsilon=1e-05, max=inf, min=-0.0, "
      "mode=\"con\\\"stant\", \"no scales\"=floats[], none=[], perm=[1,0,-7], "
      "scales=[0.5,2.0,-3e-300], transB=1} pass=F tags={LAYER:1,PP:-2}");
  has_line(
      "op 3 piper.Adam \"/adam\" (\"onnx::Gemm_5\", dw, m, \"\") -> (_, m, \"\") pass=U tags={}");
  has_line("inputs x ids");
  has_line("loss \"_\" seed=scale");
  has_line("tensor dw f32[8,16] gradient accumulated=1");
  has_line("trained \"onnx::Gemm_5\" grad=dw state=[m,\"\"]");
  has_line("trained scale");
  has_line("task 0 compute F mb=0 tags={LAYER:0} devices=[0] stream=compute ops=[0,1]");
  has_line(
      "task 1 send F mb=3 tags={LAYER:0} devices=[0] stream=p2p tensors=[\"h out\",\"_\"] peer=1");
  has_line(
      "task 2 recv F mb=3 tags={} devices=[1] stream=p2p tensors=[\"h out\",\"_\"] peer=0 "
      "replica=1");
  has_line(
      "task 3 all_reduce B mb=0 tags={} devices=[0,1,2] stream=\"dp stream\" tensors=[dw] "
      "average=1");
  has_line("task 8 compute U mb=0 tags={} devices=[] stream=\"\" ops=[3,99]");
  has_line("edge 0 -> 7 temporal");
  has_line("edge 1 -> 7 window");
  has_line("edge -1 -> 12 data");
}

TEST(TextTest, ParsesHandWrittenGraph) {
  const TaskGraph graph = parse(R"(
# A comment, then a blank line.

tensor x f32[4,8] input
tensor w f32[8,16] parameter init=w
tensor h f32[4,16] activation   # trailing comment
tensor c i64[2] constant data=[3,-4]
op 0 Gemm "/fc1/Gemm" (x, w, _) -> (h) {transB=1, alpha=1.0, perm=[1,0], f=[1,2.5]} tags={LAYER:0}
op 1 Relu "/relu" (h)->(h)
inputs x
trained w
task 0 compute F tags={LAYER:0} ops=[0,1] devices=[0]
task 1 send F stream=p2p tensors=[h] peer=1
edge 0 -> 1
)");
  const OpGraph& ops = graph.op_graph();
  ASSERT_EQ(ops.num_tensors(), 4);
  EXPECT_EQ(ops.tensor(1).initializer, "w");
  EXPECT_EQ(ops.tensor(3).data, bytes_of<int64_t>({3, -4}));
  ASSERT_EQ(ops.num_ops(), 2);
  EXPECT_EQ(ops.op(0).inputs, (std::vector<TensorId>{0, 1, -1}));
  EXPECT_EQ(ops.op(0).attributes.at("transB"), AttributeValue(int64_t{1}));
  EXPECT_EQ(ops.op(0).attributes.at("alpha"), AttributeValue(1.0));
  EXPECT_EQ(ops.op(0).attributes.at("perm"), AttributeValue(std::vector<int64_t>{1, 0}));
  EXPECT_EQ(ops.op(0).attributes.at("f"), AttributeValue(std::vector<double>{1, 2.5}));
  EXPECT_EQ(ops.op(1).pass, Pass::kForward);
  EXPECT_TRUE(ops.op(1).tags.empty());
  EXPECT_EQ(ops.trained[0].gradient, -1);
  ASSERT_EQ(graph.num_tasks(), 2);
  EXPECT_EQ(graph.task(0).devices, std::vector<int>{0});
  EXPECT_EQ(graph.task(1).stream, "p2p");
  EXPECT_EQ(graph.task(1).devices, std::vector<int>{});
  EXPECT_EQ(graph.task(1).microbatch, 0);
  ASSERT_EQ(graph.edges().size(), 1u);
  EXPECT_EQ(graph.edges()[0].kind, EdgeKind::kData);
}

TEST(TextTest, DataAsNumbersOrHexReadsTheSame) {
  const TaskGraph graph = parse(
      "tensor a f32[2] constant data=[1,0.5]\n"
      "tensor b f32[2] constant data=0x0000803f0000003f\n");
  EXPECT_EQ(graph.op_graph().tensor(0).data, graph.op_graph().tensor(1).data);
}

TEST(TextTest, PrintsUnknownTensorIdsForDebugging) {
  TaskGraph graph = parse("tensor x f32[2] input\ntask 0 send F devices=[0] tensors=[x] peer=1\n");
  graph.task(0).tensors.push_back(7);
  EXPECT_EQ(print(graph),
            "tensor x f32[2] input\n"
            "task 0 send F mb=0 tags={} devices=[0] stream=compute tensors=[x,\"#7\"] peer=1\n");
  EXPECT_THROW(parse(print(graph)), std::invalid_argument);
}

void expect_parse_error(const std::string& text, const std::string& message) {
  try {
    parse(text);
    ADD_FAILURE() << "parsed without error: " << text;
  } catch (const std::invalid_argument& error) {
    EXPECT_EQ(error.what(), message);
  }
}

TEST(TextTest, ErrorsNameTheLineAndWhatWasExpected) {
  const std::string x = "tensor x f32[2] input\n";
  expect_parse_error("tensr x f32[2] input",
                     "line 1: expected tensor, op, inputs, loss, trained, grad_norm, shard_groups, "
                     "task or edge, got 'tensr'");
  expect_parse_error("\ntensor x f64[2] input",
                     "line 2: expected a dtype (f32, i64, bool), got 'f64'");
  expect_parse_error("tensor x f32[2,] input", "line 1: expected a dimension, got ']'");
  expect_parse_error(x + "tensor x f32[2] input", "line 2: expected a new tensor name, got 'x'");
  expect_parse_error(x + "op 0 Relu \"r\" (x, y) -> (x)",
                     "line 2: expected the name of a declared tensor, got 'y'");
  expect_parse_error(x + "op 1 Relu \"r\" (x) -> (x)", "line 2: expected op index 0, got '1'");
  expect_parse_error(x + "op 0 Relu \"r\" (x) (x)", "line 2: expected '->', got '('");
  expect_parse_error(x + "op 0 Relu \"r\" (x) -> (x) pass=F pass=B",
                     "line 2: expected pass= or tags=, got 'pass'");
  expect_parse_error(x + "op 0 Relu \"r\" (x) -> (x) {a=b}",
                     "line 2: expected an attribute value (number, \"string\" or [list]), got 'b'");
  expect_parse_error(x + "op 0 Relu \"r (x) -> (x)",
                     "line 2: expected closing '\"', got end of line");
  expect_parse_error("tensor x f32[2] constant data=0x123",
                     "line 1: expected hex bytes (0x0a1b...) or [numbers], got '0x123'");
  expect_parse_error("tensor x bool[2] constant data=[1,2]",
                     "line 1: expected a bool value, got '2'");
  expect_parse_error(
      "task 0 compute F devices=[0] colour=red",
      "line 1: expected mb=, tags=, devices=, stream=, ops=, tensors=, peer=, replica=, "
      "average= or background=, got 'colour'");
  expect_parse_error("task 0 compute X", "line 1: expected a pass (F, B, BI, BW, U), got 'X'");
  expect_parse_error("edge 0 -> 1 both", "line 1: expected data, temporal or window, got 'both'");
  expect_parse_error("loss x", "line 1: expected the name of a declared tensor, got 'x'");
  expect_parse_error("tensor x f32[2] input @", "line 1: unexpected character '@'");
}

}  // namespace
}  // namespace piper::ir
