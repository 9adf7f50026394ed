// A two-layer model's training task DAG, and directives applied to it from
// strategy text, for directive tests.
#pragma once

#include <string>

#include "formats/strategy.h"
#include "onnx_builder.h"
#include "planner/annotate.h"
#include "planner/autodiff/autodiff.h"
#include "planner/autodiff/optimizer.h"
#include "planner/directives/directive.h"
#include "planner/directives/expand.h"
#include "planner/import/import.h"
#include "planner/ir/text.h"
#include "planner/ir/verify.h"

namespace piper::testing {

// `model`'s training task DAG: imported for batch `batch`, its ops tagged by `annotations` (a
// JSON array, as in a strategy), differentiated and trained with `optimizer` (a JSON object).
inline ir::TaskGraph training_task_graph(const onnx::ModelProto& model, int64_t batch,
                                         const std::string& optimizer,
                                         const std::string& annotations = "[]") {
  ir::OpGraph graph = planner::import_model(model, {.batch = batch}, "model.onnx");
  const auto strategy =
      strategy::parse_strategy(R"({"batch": {"global": 8}, "optimizer": )" + optimizer +
                                   R"(, "annotations": )" + annotations + "}",
                               "test.json");
  planner::annotate(graph, strategy.annotations, strategy.source);
  planner::differentiate(graph);
  planner::add_optimizer(graph, strategy.optimizer);
  return ir::build_task_graph(std::move(graph));
}

// x[B,4] -Gemm-> Relu -Gemm-> SoftmaxCrossEntropyLoss(labels y), trained with
// `optimizer` (a JSON object), planned for batch `batch`, its ops tagged by
// `annotations` (a JSON array, as in a strategy).
inline ir::TaskGraph two_layer_task_graph(int64_t batch, const std::string& optimizer,
                                          const std::string& annotations = "[]") {
  OnnxBuilder b;
  b.input("x", {-1, 4}).input("y", {-1}, onnx::TensorProto::INT64).output("loss", {});
  b.initializer("w1", {8, 4}, std::vector<float>(32, 0.1f));
  b.initializer("w2", {3, 8}, std::vector<float>(24, 0.2f));
  OnnxBuilder::attr(b.node("Gemm", {"x", "w1"}, {"h"}, "/fc1/Gemm"), "transB", int64_t{1});
  b.node("Relu", {"h"}, {"r"}, "/relu");
  OnnxBuilder::attr(b.node("Gemm", {"r", "w2"}, {"z"}, "/fc2/Gemm"), "transB", int64_t{1});
  b.node("SoftmaxCrossEntropyLoss", {"z", "y"}, {"loss"}, "/loss");
  return training_task_graph(b.model(), batch, optimizer, annotations);
}

// Applies the directives of a strategy's "directives" array (JSON text) as plan_model does,
// generators expanded and shard directives on their groups, planned for a global batch of
// `batch` on the mesh `mesh` (a JSON array, none if empty), verifying the DAG after each.
inline void apply_directives(ir::TaskGraph& graph, const std::string& directives, int64_t batch = 8,
                             const std::string& mesh = "") {
  const std::string meshed = mesh.empty() ? "" : R"(, "mesh": )" + mesh;
  const auto strategy = planner::on_shard_groups(planner::expand_generators(
      strategy::parse_strategy(R"({"batch": {"global": )" + std::to_string(batch) + "}" + meshed +
                                   R"(, "directives": )" + directives + "}",
                               "test.json")));
  for (const auto& directive : strategy.directives) {
    const planner::DirectiveContext context{directive, strategy.source};
    planner::directive_pass(context)(graph, context);
    ir::verify_or_throw(graph, "after " + context.where());
  }
}

// The same model in two pipeline stages: fc1 and the Relu in PP 0, fc2 and
// the loss in PP 1.
inline ir::TaskGraph two_stage_task_graph(int64_t batch, const std::string& optimizer) {
  return two_layer_task_graph(
      batch, optimizer,
      R"([{"match": "/fc1/*", "tags": {"PP": 0}}, {"match": "/fc2/*", "tags": {"PP": 1}}])");
}

// The task and edge lines of the graph's text form.
inline std::string tasks_and_edges(const ir::TaskGraph& graph) {
  std::string lines;
  size_t begin = 0;
  const std::string text = ir::print(graph);
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    const std::string line = text.substr(begin, end - begin + 1);
    if (line.starts_with("task ") || line.starts_with("edge ")) lines += line;
    begin = end + 1;
  }
  return lines;
}

inline int count_tasks(const ir::TaskGraph& graph, ir::TaskKind kind) {
  int n = 0;
  for (const ir::Task& task : graph.tasks()) n += task.kind == kind;
  return n;
}

}  // namespace piper::testing
