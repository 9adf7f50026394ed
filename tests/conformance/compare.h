// Comparing an output with its expected value, np.allclose-style: float32 within
// atol + rtol * |expected| (NaN equals NaN, infinities must match exactly), integers and
// booleans exactly.
#pragma once

#include <string>

#include "tests/conformance/test_case.h"

namespace piper::conformance {

struct Tolerance {
  double rtol = 1e-4;
  double atol = 1e-5;
};

struct Comparison {
  bool ok = true;
  // Largest |actual - expected| over the elements (infinity for a NaN/inf mismatch).
  double max_abs_diff = 0.0;
  // What differed: "shape [2, 3] vs expected [3, 2]", or the worst element with both values.
  std::string detail;
};

Comparison compare(const HostTensor& actual, const HostTensor& expected,
                   const Tolerance& tolerance);

}  // namespace piper::conformance
