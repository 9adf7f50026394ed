#include "planner/annotate.h"

#include <optional>

#include "formats/error.h"

namespace piper::planner {
namespace {

// `op` takes `from`'s tags, but for the expert tag, which it keeps as it is.
void inherit(ir::Op& op, const ir::Tags& from, const std::string& expert_tag) {
  const auto expert = op.tags.find(expert_tag);
  const std::optional<int64_t> own =
      expert == op.tags.end() ? std::nullopt : std::optional<int64_t>(expert->second);
  op.tags = from;
  op.tags.erase(expert_tag);
  if (own) op.tags[expert_tag] = *own;
}

// Untagged ops inherit from their producers in one forward sweep, then the
// still untagged ones from their consumers in one backward sweep.
void propagate_tags(ir::OpGraph& graph, std::vector<bool>& tagged, const std::string& expert_tag) {
  for (ir::OpId id = 0; id < graph.num_ops(); ++id) {
    if (tagged[id]) continue;
    for (ir::TensorId input : graph.op(id).inputs) {
      const ir::OpId producer = input >= 0 ? graph.producer(input) : -1;
      if (producer >= 0 && tagged[producer]) {
        inherit(graph.op(id), graph.op(producer).tags, expert_tag);
        tagged[id] = true;
      }
    }
  }
  for (ir::OpId id = graph.num_ops() - 1; id >= 0; --id) {
    if (tagged[id]) continue;
    for (ir::TensorId output : graph.op(id).outputs) {
      for (ir::OpId consumer : graph.consumers(output)) {
        if (!tagged[id] && tagged[consumer]) {
          inherit(graph.op(id), graph.op(consumer).tags, expert_tag);
          tagged[id] = true;
        }
      }
    }
  }
}

}  // namespace

void annotate(ir::OpGraph& graph, const std::vector<strategy::Annotation>& annotations,
              const std::string& source, const std::string& expert_tag) {
  std::vector<bool> tagged(graph.num_ops(), false);
  for (size_t index = 0; index < annotations.size(); ++index) {
    const strategy::Annotation& annotation = annotations[index];
    bool matched = false;
    for (ir::OpId id = 0; id < graph.num_ops(); ++id) {
      ir::Op& op = graph.op(id);
      if (!strategy::glob_match(annotation.match, op.name)) continue;
      for (const auto& [tag, value] : annotation.tags) op.tags[tag] = value;
      // An annotation giving only the expert's number leaves the op to go with its neighbours.
      if (expert_tag.empty() || annotation.tags.size() > annotation.tags.count(expert_tag)) {
        tagged[id] = true;
      }
      matched = true;
    }
    if (!matched) {
      throw Error(source + ": $.annotations[" + std::to_string(index) + "].match: '" +
                  annotation.match + "' matches no ONNX node; node names look like '" +
                  (graph.num_ops() ? graph.op(0).name : std::string()) + "'");
    }
  }
  if (!annotations.empty()) propagate_tags(graph, tagged, expert_tag);
}

void mark_experts(ir::OpGraph& graph, const std::string& expert_tag) {
  for (ir::OpId id = 0; id < graph.num_ops(); ++id) {
    ir::Op& op = graph.op(id);
    const auto found = op.tags.find(expert_tag);
    if (found == op.tags.end()) continue;
    op.attributes["expert"] = found->second;
    op.tags.erase(found);
  }
}

}  // namespace piper::planner
