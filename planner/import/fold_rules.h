// The constant folder's rules, one per ONNX op: the value of a node's output from the values
// of its inputs. A rule returns nullopt for a case it leaves to the engine (a dtype the folder
// does not hold, a result too large to keep in the plan) and throws piper::Error saying what
// is malformed; fold_node() (constant_folding.h) puts the node's name in front.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "planner/import/constant_value.h"

namespace piper::planner::fold {

using Inputs = std::vector<const ConstantValue*>;  // null for an omitted optional input
using Rule = std::optional<ConstantValue> (*)(const onnx::NodeProto&, const Inputs&);
using Rules = std::map<std::string, Rule>;

void add_source_rules(Rules& rules);       // Constant, ConstantOfShape, Range
void add_layout_rules(Rules& rules);       // Gather, Reshape, Slice, Concat, Expand, Tile, ...
void add_elementwise_rules(Rules& rules);  // arithmetic, comparisons, logic, Cast, Where

// Split: the one op with several outputs the folder folds, a value per output.
std::vector<ConstantValue> fold_split(const onnx::NodeProto& node, const Inputs& in);

// Folded values larger than this stay nodes: the plan would carry them as constants.
constexpr int64_t kMaxElements = int64_t{1} << 24;
// Whether a value of `shape` is too large to fold; throws when its size overflows.
bool too_large(const std::vector<int64_t>& shape);

const onnx::AttributeProto* find_attr(const onnx::NodeProto& node, const std::string& name);
int64_t int_attr(const onnx::NodeProto& node, const std::string& name, int64_t fallback);

// Input i, which must be present.
const ConstantValue& input(const Inputs& in, size_t i);
// The elements of an integer input (axes, shapes, indices).
std::vector<int64_t> int_elements(const ConstantValue& value, const std::string& what);
// `axis` in [-rank, rank) made non-negative; throws "<what> A is out of range for rank R".
int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& what = "axis");

// Calls `visit(index)` for each multi-index of `shape` in row-major order.
template <typename Visit>
void for_each_index(const std::vector<int64_t>& shape, Visit visit) {
  const int64_t n = checked_product(shape);
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t flat = 0; flat < n; ++flat) {
    visit(index);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

// Row-major strides of `shape`.
std::vector<int64_t> strides_of(const std::vector<int64_t>& shape);

}  // namespace piper::planner::fold
