#include "tests/conformance/compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>

namespace piper::conformance {
namespace {

template <typename T>
T element(const HostTensor& tensor, int64_t i) {
  T value;
  std::memcpy(&value, tensor.bytes.data() + i * sizeof(T), sizeof(T));
  return value;
}

// |a - e| for the tolerance test: 0 when both are NaN or the same infinity, infinity when
// only one is NaN or the infinities differ.
double float_diff(float a, float e) {
  if (std::isnan(a) || std::isnan(e)) {
    return std::isnan(a) && std::isnan(e) ? 0.0 : std::numeric_limits<double>::infinity();
  }
  if (std::isinf(a) || std::isinf(e)) {
    return a == e ? 0.0 : std::numeric_limits<double>::infinity();
  }
  return std::abs(static_cast<double>(a) - static_cast<double>(e));
}

}  // namespace

Comparison compare(const HostTensor& actual, const HostTensor& expected,
                   const Tolerance& tolerance) {
  Comparison result;
  if (actual.dtype != expected.dtype || actual.shape != expected.shape) {
    result.ok = false;
    result.max_abs_diff = std::numeric_limits<double>::infinity();
    result.detail = engine::dtype_name(actual.dtype) + " " + engine::shape_string(actual.shape) +
                    " vs expected " + engine::dtype_name(expected.dtype) + " " +
                    engine::shape_string(expected.shape);
    return result;
  }
  const int64_t n = engine::num_elements(expected.shape);
  int64_t worst = -1;  // the mismatching element with the largest difference
  double worst_diff = 0.0;
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    double diff = 0.0;
    bool bad = false;
    if (expected.dtype == plan::FLOAT32) {
      const float e = element<float>(expected, i);
      diff = float_diff(element<float>(actual, i), e);
      bad = std::isinf(diff) ||
            diff > tolerance.atol + tolerance.rtol * std::abs(static_cast<double>(e));
    } else if (expected.dtype == plan::INT64) {
      const int64_t a = element<int64_t>(actual, i);
      const int64_t e = element<int64_t>(expected, i);
      diff = std::abs(static_cast<double>(a) - static_cast<double>(e));
      bad = a != e;
    } else {
      const bool a = element<uint8_t>(actual, i) != 0;
      const bool e = element<uint8_t>(expected, i) != 0;
      diff = a == e ? 0.0 : 1.0;
      bad = a != e;
    }
    result.max_abs_diff = std::max(result.max_abs_diff, diff);
    if (bad) {
      ++mismatches;
      if (worst < 0 || diff > worst_diff) {
        worst = i;
        worst_diff = diff;
      }
    }
  }
  result.ok = mismatches == 0;
  if (result.ok) {
    return result;
  }
  std::ostringstream out;
  out << std::setprecision(9) << mismatches << " of " << n << " elements differ; largest |diff| "
      << worst_diff << " at element " << worst << " (got ";
  if (expected.dtype == plan::FLOAT32) {
    out << element<float>(actual, worst) << ", expected " << element<float>(expected, worst);
  } else if (expected.dtype == plan::INT64) {
    out << element<int64_t>(actual, worst) << ", expected " << element<int64_t>(expected, worst);
  } else {
    out << int(element<uint8_t>(actual, worst)) << ", expected "
        << int(element<uint8_t>(expected, worst));
  }
  out << ")";
  result.detail = out.str();
  return result;
}

}  // namespace piper::conformance
