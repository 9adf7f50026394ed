#include "planner/import/model_listing.h"

#include <algorithm>
#include <optional>
#include <set>
#include <sstream>

#include "formats/error.h"
#include "planner/import/constant_value.h"
#include "planner/import/import.h"

namespace piper::planner {
namespace {

std::string dtype_name(int32_t data_type) {
  switch (data_type) {
    case onnx::TensorProto::FLOAT:
      return "float32";
    case onnx::TensorProto::DOUBLE:
      return "float64";
    case onnx::TensorProto::FLOAT16:
      return "float16";
    case onnx::TensorProto::BFLOAT16:
      return "bfloat16";
    default: {
      std::string name =
          onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(data_type));
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      return name;
    }
  }
}

// The name import gives a node (import.cc: its own, or "<OpType>_<index>" when unnamed).
std::string node_name(const onnx::NodeProto& node, int index) {
  return node.name().empty() ? node.op_type() + "_" + std::to_string(index) : node.name();
}

// The batch to import with: one fixed in the model (which import refuses to change), else 1.
int64_t listing_batch(const onnx::GraphProto& graph) {
  std::set<std::string> initializers;
  for (const auto& init : graph.initializer()) initializers.insert(init.name());
  for (const auto& input : graph.input()) {
    if (initializers.count(input.name())) continue;
    const auto& shape = input.type().tensor_type().shape();
    if (shape.dim_size() > 0 && shape.dim(0).has_dim_value()) return shape.dim(0).dim_value();
  }
  return 1;
}

std::string padded(const std::string& text, size_t width) {
  return text + std::string(width > text.size() ? width - text.size() : 0, ' ');
}

}  // namespace

std::string list_model(const onnx::ModelProto& model, const std::string& model_name) {
  const onnx::GraphProto& graph = model.graph();
  std::optional<std::set<std::string>> planned;  // names of the nodes planning keeps
  std::string import_error;
  try {
    const ir::OpGraph ops = import_model(model, {.batch = listing_batch(graph)}, model_name);
    planned.emplace();
    for (const ir::Op& op : ops.ops()) planned->insert(op.name);
  } catch (const Error& error) {
    import_error = error.what();
  }
  std::ostringstream out;
  out << model_name << ": " << graph.node_size() << " nodes (what \"annotations\" match), "
      << graph.initializer_size() << " initializers (what \"frozen\" matches)\n";
  size_t width = 0;
  for (int i = 0; i < graph.node_size(); ++i) {
    width = std::max(width, node_name(graph.node(i), i).size());
  }
  out << "nodes:\n";
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto& node = graph.node(i);
    const std::string name = node_name(node, i);
    const std::string type = node.domain().empty() || node.domain() == "ai.onnx"
                                 ? node.op_type()
                                 : node.domain() + "." + node.op_type();
    out << "  " << padded(name, width) << "  " << type;
    if (planned && !planned->count(name)) out << "  (folded into a constant when planned)";
    out << "\n";
  }
  width = 0;
  size_t shape_width = 0;
  for (const auto& init : graph.initializer()) {
    width = std::max(width, init.name().size());
    shape_width =
        std::max(shape_width, shape_text({init.dims().begin(), init.dims().end()}).size());
  }
  out << "initializers:\n";
  for (const auto& init : graph.initializer()) {
    out << "  " << padded(init.name(), width) << "  "
        << padded(shape_text({init.dims().begin(), init.dims().end()}), shape_width) << "  "
        << dtype_name(init.data_type()) << "\n";
  }
  if (!planned) out << "(planning this model fails: " << import_error << ")\n";
  return out.str();
}

}  // namespace piper::planner
