#include "planner/annotate.h"

#include "formats/error.h"

namespace piper::planner {
namespace {

// Untagged ops inherit from their producers in one forward sweep, then the
// still untagged ones from their consumers in one backward sweep.
void propagate_tags(ir::OpGraph& graph, std::vector<bool>& tagged) {
  for (ir::OpId id = 0; id < graph.num_ops(); ++id) {
    if (tagged[id]) continue;
    for (ir::TensorId input : graph.op(id).inputs) {
      const ir::OpId producer = input >= 0 ? graph.producer(input) : -1;
      if (producer >= 0 && tagged[producer]) {
        graph.op(id).tags = graph.op(producer).tags;
        tagged[id] = true;
      }
    }
  }
  for (ir::OpId id = graph.num_ops() - 1; id >= 0; --id) {
    if (tagged[id]) continue;
    for (ir::TensorId output : graph.op(id).outputs) {
      for (ir::OpId consumer : graph.consumers(output)) {
        if (!tagged[id] && tagged[consumer]) {
          graph.op(id).tags = graph.op(consumer).tags;
          tagged[id] = true;
        }
      }
    }
  }
}

}  // namespace

void annotate(ir::OpGraph& graph, const std::vector<strategy::Annotation>& annotations,
              const std::string& source) {
  std::vector<bool> tagged(graph.num_ops(), false);
  for (size_t index = 0; index < annotations.size(); ++index) {
    const strategy::Annotation& annotation = annotations[index];
    bool matched = false;
    for (ir::OpId id = 0; id < graph.num_ops(); ++id) {
      ir::Op& op = graph.op(id);
      if (!strategy::glob_match(annotation.match, op.name)) continue;
      for (const auto& [tag, value] : annotation.tags) op.tags[tag] = value;
      tagged[id] = matched = true;
    }
    if (!matched) {
      throw Error(source + ": $.annotations[" + std::to_string(index) + "].match: '" +
                  annotation.match + "' matches no ONNX node; node names look like '" +
                  (graph.num_ops() ? graph.op(0).name : std::string()) + "'");
    }
  }
  if (!annotations.empty()) propagate_tags(graph, tagged);
}

}  // namespace piper::planner
