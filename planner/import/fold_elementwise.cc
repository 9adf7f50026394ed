// Rules for the element-wise ops: arithmetic, comparisons, logic, Cast and Where. Elements
// are computed in their own type: int64 exactly (wrapping as the engine's kernels do), float32
// in float32 arithmetic, so a folded value equals what the engine and PyTorch would compute.
#include <cmath>
#include <limits>
#include <type_traits>

#include "formats/error.h"
#include "planner/import/fold_rules.h"

namespace piper::planner::fold {
namespace {

using onnx::TensorProto;

std::string type_name(int32_t data_type) {
  return TensorProto::DataType_Name(static_cast<TensorProto::DataType>(data_type));
}

// An integer result held in a narrower integer dtype wraps (bool: nonzero is true).
int64_t narrow(int64_t value, int32_t data_type) {
  switch (data_type) {
    case TensorProto::INT32:
      return static_cast<int32_t>(value);
    case TensorProto::UINT8:
      return static_cast<uint8_t>(value);
    case TensorProto::BOOL:
      return value != 0;
    default:
      return value;
  }
}

template <typename T>
void store(ConstantValue& out, T value) {
  if (out.is_integer()) {
    out.ints.push_back(narrow(static_cast<int64_t>(value), out.data_type));
  } else {
    out.reals.push_back(static_cast<double>(value));
  }
}

// Calls fn(element) on element i of `value` read in its own type.
template <typename Fn>
auto with_element(const ConstantValue& value, int64_t i, Fn fn) {
  if (value.is_integer()) return fn(value.ints[i]);
  if (value.data_type == TensorProto::FLOAT) return fn(static_cast<float>(value.reals[i]));
  return fn(value.reals[i]);
}

void expect_type(const ConstantValue& value, bool allowed, const std::string& what) {
  if (!allowed) throw Error("does not take " + what + " of type " + type_name(value.data_type));
}

bool is_bool(const ConstantValue& value) { return value.data_type == TensorProto::BOOL; }

template <typename Fn>
ConstantValue binary(const ConstantValue& a, const ConstantValue& b, int32_t out_type, Fn fn) {
  if (a.data_type != b.data_type) {
    throw Error("inputs have different types (" + type_name(a.data_type) + " and " +
                type_name(b.data_type) + ")");
  }
  const Broadcast pairs = broadcast(a.shape, b.shape);
  ConstantValue out;
  out.data_type = out_type;
  out.shape = pairs.shape;
  for (size_t i = 0; i < pairs.a.size(); ++i) {
    with_element(a, pairs.a[i], [&](auto x) {
      using T = decltype(x);
      const T y =
          b.is_integer() ? static_cast<T>(b.ints[pairs.b[i]]) : static_cast<T>(b.reals[pairs.b[i]]);
      store(out, fn(x, y));
    });
  }
  return out;
}

template <typename Fn>
ConstantValue unary(const ConstantValue& a, Fn fn) {
  ConstantValue out;
  out.data_type = a.data_type;
  out.shape = a.shape;
  for (size_t i = 0; i < a.stored(); ++i) {
    with_element(a, static_cast<int64_t>(i), [&](auto x) { store(out, fn(x)); });
  }
  return out;
}

template <typename T>
constexpr bool kInteger = std::is_integral_v<T>;

// Two's-complement wrapping, which C++ leaves undefined for signed overflow.
template <typename T, typename Fn>
T wrapping(T a, T b, Fn fn) {
  if constexpr (kInteger<T>) {
    return static_cast<T>(fn(static_cast<uint64_t>(a), static_cast<uint64_t>(b)));
  } else {
    return fn(a, b);
  }
}

std::optional<ConstantValue> fold_arithmetic(const onnx::NodeProto& node, const Inputs& in) {
  const ConstantValue &a = input(in, 0), &b = input(in, 1);
  expect_type(a, !is_bool(a), "booleans");
  const std::string& op = node.op_type();
  const auto type = a.data_type;
  if (op == "Add")
    return binary(a, b, type, [](auto x, auto y) { return wrapping(x, y, std::plus<>()); });
  if (op == "Sub")
    return binary(a, b, type, [](auto x, auto y) { return wrapping(x, y, std::minus<>()); });
  if (op == "Mul") {
    return binary(a, b, type, [](auto x, auto y) { return wrapping(x, y, std::multiplies<>()); });
  }
  return binary(a, b, type, [](auto x, auto y) {
    using T = decltype(x);
    if constexpr (kInteger<T>) {
      if (y == 0) throw Error("divides an integer by zero");
      if (y == -1) return wrapping(T{0}, x, std::minus<>());  // INT64_MIN / -1 wraps
    }
    return static_cast<T>(x / y);  // integers truncate toward zero, as ONNX's kernels do
  });
}

// ONNX Mod: fmod=0 (integers only) takes the divisor's sign, as Python's %; fmod=1 the
// dividend's, as C's fmod.
std::optional<ConstantValue> fold_mod(const onnx::NodeProto& node, const Inputs& in) {
  const ConstantValue &a = input(in, 0), &b = input(in, 1);
  const bool c_style = int_attr(node, "fmod", 0) != 0;
  expect_type(a, !is_bool(a) && (c_style || a.is_integer()), "fmod=0 inputs");
  return binary(a, b, a.data_type, [c_style](auto x, auto y) {
    using T = decltype(x);
    if constexpr (kInteger<T>) {
      if (y == 0) throw Error("takes an integer modulo zero");
      if (y == -1) return T{0};
      const T r = x % y;
      return !c_style && r != 0 && (r < 0) != (y < 0) ? static_cast<T>(r + y) : r;
    } else {
      return static_cast<T>(std::fmod(x, y));
    }
  });
}

// Min and Max take any number of inputs; a NaN wins, as in numpy.minimum.
template <bool kMin>
std::optional<ConstantValue> fold_extremum(const onnx::NodeProto&, const Inputs& in) {
  ConstantValue out = input(in, 0);
  expect_type(out, !is_bool(out), "booleans");
  for (size_t i = 1; i < in.size(); ++i) {
    out = binary(out, input(in, i), out.data_type, [](auto x, auto y) {
      if constexpr (!kInteger<decltype(x)>) {
        if (std::isnan(x) || std::isnan(y)) return x + y;
      }
      return (kMin ? y < x : x < y) ? y : x;
    });
  }
  return out;
}

std::optional<ConstantValue> fold_comparison(const onnx::NodeProto& node, const Inputs& in) {
  const ConstantValue &a = input(in, 0), &b = input(in, 1);
  const std::string& op = node.op_type();
  const auto type = TensorProto::BOOL;
  if (op == "Equal") return binary(a, b, type, [](auto x, auto y) { return x == y; });
  if (op == "Less") return binary(a, b, type, [](auto x, auto y) { return x < y; });
  if (op == "Greater") return binary(a, b, type, [](auto x, auto y) { return x > y; });
  if (op == "LessOrEqual") return binary(a, b, type, [](auto x, auto y) { return x <= y; });
  return binary(a, b, type, [](auto x, auto y) { return x >= y; });
}

std::optional<ConstantValue> fold_logical(const onnx::NodeProto& node, const Inputs& in) {
  const ConstantValue& a = input(in, 0);
  expect_type(a, is_bool(a), "inputs");
  const std::string& op = node.op_type();
  if (op == "Not") return unary(a, [](auto x) { return x == 0; });
  const ConstantValue& b = input(in, 1);
  const auto type = TensorProto::BOOL;
  if (op == "And") return binary(a, b, type, [](auto x, auto y) { return x && y; });
  if (op == "Or") return binary(a, b, type, [](auto x, auto y) { return x || y; });
  return binary(a, b, type, [](auto x, auto y) { return (x != 0) != (y != 0); });
}

std::optional<ConstantValue> fold_neg(const onnx::NodeProto&, const Inputs& in) {
  const ConstantValue& a = input(in, 0);
  expect_type(a, !is_bool(a), "booleans");
  return unary(a, [](auto x) { return wrapping(decltype(x){0}, x, std::minus<>()); });
}

std::optional<ConstantValue> fold_abs(const onnx::NodeProto&, const Inputs& in) {
  const ConstantValue& a = input(in, 0);
  expect_type(a, !is_bool(a), "booleans");
  return unary(a, [](auto x) { return x < 0 ? wrapping(decltype(x){0}, x, std::minus<>()) : x; });
}

std::optional<ConstantValue> fold_log(const onnx::NodeProto&, const Inputs& in) {
  const ConstantValue& a = input(in, 0);
  expect_type(a, !a.is_integer(), "integers");
  // std::log on a float is the float overload: float32's correctly rounded logarithm.
  return unary(a, [](auto x) {
    if constexpr (kInteger<decltype(x)>) {
      return x;  // unreachable: integers were refused above
    } else {
      return std::log(x);
    }
  });
}

bool foldable_type(int64_t type) {
  return type == TensorProto::FLOAT || type == TensorProto::DOUBLE || type == TensorProto::INT64 ||
         type == TensorProto::INT32 || type == TensorProto::UINT8 || type == TensorProto::BOOL;
}

// A real cast to an integer truncates toward zero; NaN and values the integer type cannot
// hold give its most negative value, as x86, numpy, PyTorch and the engine's Cast do (T5's
// position buckets cast log(0) = -inf and then discard it).
int64_t truncate_real(double x, int32_t to) {
  const bool narrow32 = to == TensorProto::INT32 || to == TensorProto::UINT8;
  const double limit = narrow32 ? 2147483648.0 : 9223372036854775808.0;  // 2^31, 2^63
  const double whole = std::trunc(x);
  if (!(whole >= -limit && whole < limit)) {
    return narrow32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
  }
  return static_cast<int64_t>(whole);
}

std::optional<ConstantValue> fold_cast(const onnx::NodeProto& node, const Inputs& in) {
  const ConstantValue& a = input(in, 0);
  const int64_t to = int_attr(node, "to", TensorProto::UNDEFINED);
  if (!foldable_type(to)) return std::nullopt;
  ConstantValue out;
  out.data_type = static_cast<int32_t>(to);
  out.shape = a.shape;
  for (size_t i = 0; i < a.stored(); ++i) {
    if (out.data_type == TensorProto::BOOL) {
      out.ints.push_back(a.is_integer() ? a.ints[i] != 0 : a.reals[i] != 0);
    } else if (out.is_integer()) {
      const int64_t value = a.is_integer() ? a.ints[i] : truncate_real(a.reals[i], out.data_type);
      out.ints.push_back(narrow(value, out.data_type));
    } else {
      const double value = a.is_integer() ? static_cast<double>(a.ints[i]) : a.reals[i];
      const bool to_float = out.data_type == TensorProto::FLOAT;
      // int64 -> float32 rounds once, straight to float32 (never through a double).
      out.reals.push_back(!to_float        ? value
                          : a.is_integer() ? static_cast<float>(a.ints[i])
                                           : static_cast<float>(value));
    }
  }
  return out;
}

std::optional<ConstantValue> fold_where(const onnx::NodeProto&, const Inputs& in) {
  const ConstantValue &condition = input(in, 0), &x = input(in, 1), &y = input(in, 2);
  expect_type(condition, is_bool(condition), "a condition");
  if (x.data_type != y.data_type) {
    throw Error("X and Y have different types (" + type_name(x.data_type) + " and " +
                type_name(y.data_type) + ")");
  }
  const auto shape = broadcast(broadcast(condition.shape, x.shape).shape, y.shape).shape;
  const auto ci = broadcast_index(condition.shape, shape);
  const auto xi = broadcast_index(x.shape, shape);
  const auto yi = broadcast_index(y.shape, shape);
  ConstantValue out;
  out.data_type = x.data_type;
  out.shape = shape;
  for (size_t i = 0; i < ci.size(); ++i) {
    const bool pick_x = condition.ints[ci[i]] != 0;
    if (out.is_integer()) {
      out.ints.push_back(pick_x ? x.ints[xi[i]] : y.ints[yi[i]]);
    } else {
      out.reals.push_back(pick_x ? x.reals[xi[i]] : y.reals[yi[i]]);
    }
  }
  return out;
}

}  // namespace

void add_elementwise_rules(Rules& rules) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) rules[op] = fold_arithmetic;
  for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
    rules[op] = fold_comparison;
  }
  for (const char* op : {"Not", "And", "Or", "Xor"}) rules[op] = fold_logical;
  rules["Mod"] = fold_mod;
  rules["Min"] = fold_extremum<true>;
  rules["Max"] = fold_extremum<false>;
  rules["Neg"] = fold_neg;
  rules["Abs"] = fold_abs;
  rules["Log"] = fold_log;
  rules["Cast"] = fold_cast;
  rules["Where"] = fold_where;
}

}  // namespace piper::planner::fold
