// ONNX's reductions as three steps, shared by the CPU kernels (reduce.cc) and the CUDA ones
// (engine/cuda/reduce.cu) so that both backends reduce alike: every element of a group is
// mapped, the mapped values are folded in double precision, and the fold is finished. The CPU
// adds the sums of float32 x, |x| and x² in float32 in the split-invariant order instead
// (split_invariant_sum.h), so that data parallelism's halves of a batch give one process's sum.
//   ReduceSum, ReduceMean  x          sum          · scale (1, or 1/count for the mean)
//   ReduceMax, ReduceMin   x          max, min     (NaN propagates, as PyTorch's amax/amin)
//   ReduceProd             x          product
//   ReduceL1               |x|        sum
//   ReduceL2               x²         sum          √
//   ReduceSumSquare        x²         sum
//   ReduceLogSum           x          sum          log
//   ReduceLogSumExp        e^(x − m)  sum          log, + m
// with m the group's maximum (0 where it is not finite), found by a first max fold, so that no
// exponential overflows. An empty group gives the fold's identity, finished. int64 tensors
// fold exactly in int64 (wrapping on overflow) where the result is an integer: Sum, Max, Min,
// Prod, L1, SumSquare.
#pragma once

#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "engine/cpu/host_device.h"

namespace piper::engine::cpu {

enum class ReduceFold { kSum, kProd, kMax, kMin };
// kIsZero and kNonzero (x, or 1 for 0) serve ReduceProd's gradient.
enum class ReduceMap { kIdentity, kAbs, kSquare, kExpShifted, kIsZero, kNonzero };
enum class ReduceFinish { kScale, kSqrt, kLogShifted };

struct ReduceFormula {
  ReduceFold fold = ReduceFold::kSum;
  ReduceMap map = ReduceMap::kIdentity;
  ReduceFinish finish = ReduceFinish::kScale;
  bool mean = false;  // kScale's scale is 1 / count rather than 1
};

// The ONNX ops and their reductions.
struct NamedFormula {
  const char* op;
  ReduceFormula reduction;
};
inline constexpr NamedFormula kReduceFormulas[] = {
    {"ReduceSum", {}},
    {"ReduceMean", {ReduceFold::kSum, ReduceMap::kIdentity, ReduceFinish::kScale, true}},
    {"ReduceMax", {ReduceFold::kMax}},
    {"ReduceMin", {ReduceFold::kMin}},
    {"ReduceProd", {ReduceFold::kProd}},
    {"ReduceL1", {ReduceFold::kSum, ReduceMap::kAbs}},
    {"ReduceL2", {ReduceFold::kSum, ReduceMap::kSquare, ReduceFinish::kSqrt}},
    {"ReduceSumSquare", {ReduceFold::kSum, ReduceMap::kSquare}},
    {"ReduceLogSum", {ReduceFold::kSum, ReduceMap::kIdentity, ReduceFinish::kLogShifted}},
    {"ReduceLogSumExp", {ReduceFold::kSum, ReduceMap::kExpShifted, ReduceFinish::kLogShifted}},
};

// The max fold that finds LogSumExp's shifts.
inline constexpr ReduceFormula kShiftFormula = {ReduceFold::kMax};
// The folds of ReduceProd's gradient: the zeros of a group, and the product of its nonzeros.
inline constexpr ReduceFormula kZeroCount = {ReduceFold::kSum, ReduceMap::kIsZero};
inline constexpr ReduceFormula kNonzeroProduct = {ReduceFold::kProd, ReduceMap::kNonzero};

// Whether int64 tensors take the reduction (into int64).
constexpr bool takes_int64(const ReduceFormula& r) {
  return r.finish == ReduceFinish::kScale && !r.mean &&
         (r.map == ReduceMap::kIdentity || r.map == ReduceMap::kAbs || r.map == ReduceMap::kSquare);
}

// a + b and a · b; int64 wraps on overflow, as numpy and PyTorch do (C++ leaves it undefined).
template <typename T>
PIPER_HOST_DEVICE T wrapping_add(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a + b;
  } else {
    return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  }
}
template <typename T>
PIPER_HOST_DEVICE T wrapping_mul(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a * b;
  } else {
    return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  }
}

// T: double (float tensors) or int64_t.
template <typename T>
PIPER_HOST_DEVICE T reduce_identity(ReduceFold fold) {
  constexpr bool kFloat = std::is_floating_point_v<T>;
  switch (fold) {
    case ReduceFold::kSum:
      return T(0);
    case ReduceFold::kProd:
      return T(1);
    case ReduceFold::kMax:
      return kFloat ? T(-INFINITY) : T(INT64_MIN);
    case ReduceFold::kMin:
      return kFloat ? T(INFINITY) : T(INT64_MAX);
  }
  return T(0);
}

template <typename T>
PIPER_HOST_DEVICE T reduce_map(ReduceMap map, T x, T shift) {
  switch (map) {
    case ReduceMap::kIdentity:
      return x;
    case ReduceMap::kAbs:
      return x < T(0) ? wrapping_mul(x, T(-1)) : x;
    case ReduceMap::kSquare:
      return wrapping_mul(x, x);
    case ReduceMap::kExpShifted:
      if constexpr (std::is_floating_point_v<T>) return exp(x - shift);
      return x;
    case ReduceMap::kIsZero:
      return x == T(0) ? T(1) : T(0);
    case ReduceMap::kNonzero:
      return x == T(0) ? T(1) : x;
  }
  return x;
}

template <typename T>
PIPER_HOST_DEVICE T reduce_combine(ReduceFold fold, T acc, T v) {
  switch (fold) {
    case ReduceFold::kSum:
      return wrapping_add(acc, v);
    case ReduceFold::kProd:
      return wrapping_mul(acc, v);
    case ReduceFold::kMax:
      return v != v || v > acc ? v : acc;
    case ReduceFold::kMin:
      return v != v || v < acc ? v : acc;
  }
  return acc;
}

PIPER_HOST_DEVICE inline double reduce_finish(ReduceFinish finish, double acc, double scale,
                                              double shift) {
  switch (finish) {
    case ReduceFinish::kScale:
      return acc * scale;
    case ReduceFinish::kSqrt:
      return sqrt(acc);
    case ReduceFinish::kLogShifted:
      return log(acc) + shift;
  }
  return acc;
}

// LogSumExp's shift from its group's maximum m: m, or 0 where m is infinite (an empty or
// all −∞ group, whose sum of exponentials is then 0) or NaN (which propagates either way).
PIPER_HOST_DEVICE inline double reduce_shift(double maximum) {
  return maximum - maximum == 0.0 ? maximum : 0.0;
}

// ReduceProd's gradient at element x of a group with `zeros` zero elements whose nonzero
// elements multiply to `product`: dy times the product of the group's other elements.
PIPER_HOST_DEVICE inline float reduce_prod_grad(float dy, float x, float zeros, float product) {
  if (zeros == 0.0f) return static_cast<float>(static_cast<double>(dy) * product / x);
  return zeros == 1.0f && x == 0.0f ? dy * product : 0.0f;
}

}  // namespace piper::engine::cpu
