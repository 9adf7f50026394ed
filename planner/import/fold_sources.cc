// Rules for the ops that create values: Constant, ConstantOfShape and Range.
#include <cmath>

#include "formats/error.h"
#include "planner/import/fold_rules.h"

namespace piper::planner::fold {
namespace {

std::optional<ConstantValue> fold_constant(const onnx::NodeProto& node, const Inputs&) {
  ConstantValue value;
  if (const auto* attr = find_attr(node, "value")) {
    if (!from_tensor_proto(attr->t(), value)) return std::nullopt;
  } else if (const auto* attr = find_attr(node, "value_int")) {
    value.data_type = onnx::TensorProto::INT64;
    value.ints = {attr->i()};
  } else if (const auto* attr = find_attr(node, "value_ints")) {
    value = int_vector({attr->ints().begin(), attr->ints().end()});
  } else if (const auto* attr = find_attr(node, "value_float")) {
    value.reals = {attr->f()};
  } else if (const auto* attr = find_attr(node, "value_floats")) {
    value.shape = {attr->floats_size()};
    value.reals.assign(attr->floats().begin(), attr->floats().end());
  } else {
    return std::nullopt;  // sparse or string values
  }
  return value;
}

std::optional<ConstantValue> fold_constant_of_shape(const onnx::NodeProto& node, const Inputs& in) {
  ConstantValue fill;
  fill.reals = {0.0};
  if (const auto* attr = find_attr(node, "value")) {
    if (!from_tensor_proto(attr->t(), fill)) return std::nullopt;
    if (fill.stored() != 1) throw Error("value must hold one element");
  }
  ConstantValue out;
  out.data_type = fill.data_type;
  out.shape = int_elements(input(in, 0), "the shape input");
  if (too_large(out.shape)) return std::nullopt;
  const auto n = static_cast<size_t>(out.size());
  if (out.is_integer()) {
    out.ints.assign(n, fill.ints[0]);
  } else {
    out.reals.assign(n, fill.reals[0]);
  }
  return out;
}

// ONNX: n = max(ceil((limit - start) / delta), 0) and element i is start + i * delta, in the
// inputs' type (float32 arithmetic for float32, exact for integers).
template <typename T>
std::optional<std::vector<T>> range_values(T start, T limit, T delta) {
  if (delta == 0) throw Error("delta must not be 0");
  int64_t n = 0;
  if constexpr (std::is_integral_v<T>) {
    // |limit - start| and |delta| as uint64, where every int64 difference fits.
    const bool up = delta > 0;
    if (up ? limit > start : limit < start) {
      const uint64_t span = up ? static_cast<uint64_t>(limit) - static_cast<uint64_t>(start)
                               : static_cast<uint64_t>(start) - static_cast<uint64_t>(limit);
      const uint64_t stride =
          up ? static_cast<uint64_t>(delta) : static_cast<uint64_t>(-(delta + 1)) + 1;
      const uint64_t steps = (span - 1) / stride + 1;
      if (steps > static_cast<uint64_t>(kMaxElements)) return std::nullopt;
      n = static_cast<int64_t>(steps);
    }
  } else {
    const T steps = std::ceil((limit - start) / delta);
    if (!(steps <= static_cast<T>(kMaxElements))) return std::nullopt;  // also NaN
    n = steps > 0 ? static_cast<int64_t>(steps) : 0;
  }
  std::vector<T> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_integral_v<T>) {
      // Unsigned, as i * delta alone may exceed int64; the sum lies between start and limit.
      values[i] = static_cast<int64_t>(static_cast<uint64_t>(start) +
                                       static_cast<uint64_t>(i) * static_cast<uint64_t>(delta));
    } else {
      values[i] = start + static_cast<T>(i) * delta;
    }
  }
  return values;
}

std::optional<ConstantValue> fold_range(const onnx::NodeProto&, const Inputs& in) {
  const ConstantValue &start = input(in, 0), &limit = input(in, 1), &delta = input(in, 2);
  for (const ConstantValue* bound : {&start, &limit, &delta}) {
    if (bound->stored() != 1) throw Error("start, limit and delta must be scalars");
    if (bound->data_type != start.data_type) throw Error("start, limit and delta differ in type");
  }
  ConstantValue out;
  out.data_type = start.data_type;
  if (start.is_integer()) {
    auto values = range_values<int64_t>(start.ints[0], limit.ints[0], delta.ints[0]);
    if (!values) return std::nullopt;
    out.ints = std::move(*values);
  } else if (start.data_type == onnx::TensorProto::FLOAT) {
    auto values =
        range_values<float>(static_cast<float>(start.reals[0]), static_cast<float>(limit.reals[0]),
                            static_cast<float>(delta.reals[0]));
    if (!values) return std::nullopt;
    out.reals.assign(values->begin(), values->end());
  } else {
    auto values = range_values<double>(start.reals[0], limit.reals[0], delta.reals[0]);
    if (!values) return std::nullopt;
    out.reals = std::move(*values);
  }
  out.shape = {static_cast<int64_t>(out.stored())};
  return out;
}

}  // namespace

void add_source_rules(Rules& rules) {
  rules["Constant"] = fold_constant;
  rules["ConstantOfShape"] = fold_constant_of_shape;
  rules["Range"] = fold_range;
}

}  // namespace piper::planner::fold
