// exp and erf for float32 kernels, written without calls or branches so that GCC vectorises
// the loops that use them (glibc's expf and erff are calls, which keep a loop scalar), and the
// array functions exp_n, erf_n and sigmoid_n, which run them over arrays with the widest vectors
// the CPU has: 5 to 10 times faster than std::exp and std::erf with AVX-512. Each step of their
// polynomials is one fused multiply-add (a quarter faster on an AVX2 EPYC than a multiply and an
// add), which only the array functions' copies for CPUs with the instruction run as one: kernels
// call the array functions, not vexp and verf, so that every kernel gets the same bits.
// Accuracy, checked against the double-precision functions in cpu_vector_math_test: exp within
// 2 ulp relative (but 0 below e^-86.9 = 2^-125.4, where std::exp still gives tiny normal and
// subnormal floats); erf within 4e-7 absolute and relative. NaN propagates; exp(-inf) is 0 and
// exp(+inf) is +inf, as with std::exp. Results are the same on every CPU and vector width.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

// One copy of a function per vector width, chosen when the program loads (GCC function
// multiversioning): AVX-512, AVX2 with FMA (x86-64-v3) and the baseline. Files that use it
// build with -ffp-contract=off (engine/CMakeLists.txt), so that the copies round alike.
#if defined(__x86_64__) && defined(__GNUC__)
#define PIPER_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PIPER_VECTOR_CLONES
#endif

namespace piper::engine::cpu {

// vexp(x) is exactly 0 for x below this: n >= -125, so that 2^(n-1) is a normal float.
constexpr float kExpZeroBelow = -86.9f;

// A polynomial's step p · x + c, rounded once: fmaf's bits on every CPU (an instruction in the
// array functions' AVX2 and AVX-512 copies, a call elsewhere).
[[gnu::always_inline]] inline float horner_step(float p, float x, float c) {
  return __builtin_fmaf(p, x, c);
}

// e^x: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two parts, so that n ln2 is exact),
// e^r by its Taylor polynomial of degree 7, then 2^n put into the exponent bits.
[[gnu::always_inline]] inline float vexp(float x) {
  constexpr float kLog2e = 1.44269504089f;
  constexpr float kLn2High = 0.693145751953125f;  // 12 significant bits: n * kLn2High is exact
  constexpr float kLn2Low = 1.428606765330187e-06f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kMax = 88.72283f;      // e^kMax is the largest finite float: n <= 128
  constexpr float kMin = kExpZeroBelow;
  const float clamped = x < kMin ? kMin : (x > kMax ? kMax : x);
  const float shifted = clamped * kLog2e + kRound;
  const float n = shifted - kRound;
  const float r = (clamped - n * kLn2High) - n * kLn2Low;
  float p = 1.0f / 5040.0f;
  p = horner_step(p, r, 1.0f / 720.0f);
  p = horner_step(p, r, 1.0f / 120.0f);
  p = horner_step(p, r, 1.0f / 24.0f);
  p = horner_step(p, r, 1.0f / 6.0f);
  p = horner_step(p, r, 0.5f);
  p = horner_step(p, r, 1.0f);
  p = horner_step(p, r, 1.0f);
  // The integer n sits in shifted's low mantissa bits. 2^n itself overflows for n = 128, so
  // the result is (p · 2^(n-1)) · 2.
  const int32_t exponent = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRound) + 126;
  const float result = p * std::bit_cast<float>(exponent << 23) * 2.0f;
  const float inf = std::numeric_limits<float>::infinity();
  return x != x ? x : (x < kMin ? 0.0f : (x > kMax ? inf : result));
}

// erf(x): for |x| < 2, x · P(x²) with P a least-squares fit of erf(x)/x; for 2 <= |x| < 4.5,
// 1 − e^(−x²) · Q(1/x) with Q a fit of erfc(x) e^(x²); beyond, ±1 (erf rounds to 1 in float
// from |x| = 3.92).
// verf's polynomial for |x| < 2: a · P(a²), a = min(|x|, 2).
[[gnu::always_inline]] inline float verf_near_magnitude(float a) {
  const float small = a < 2.0f ? a : 2.0f;
  const float s = small * small;
  float p = 2.709679370e-09f;
  p = horner_step(p, s, -8.360810000e-08f);
  p = horner_step(p, s, 1.295837933e-06f);
  p = horner_step(p, s, -1.390496800e-05f);
  p = horner_step(p, s, 1.185753645e-04f);
  p = horner_step(p, s, -8.523235447e-04f);
  p = horner_step(p, s, 5.221971311e-03f);
  p = horner_step(p, s, -2.686522901e-02f);
  p = horner_step(p, s, 1.128376871e-01f);
  p = horner_step(p, s, -3.761263788e-01f);
  p = horner_step(p, s, 1.128379226e+00f);
  return small * p;
}

[[gnu::always_inline]] inline float verf(float x) {
  const float a = x < 0.0f ? -x : x;
  const float near = verf_near_magnitude(a);
  const float large = a < 2.0f ? 2.0f : (a > 4.5f ? 4.5f : a);
  const float u = 1.0f / large;
  float q = 2.259011753e-02f;
  q = horner_step(q, u, -1.773822308e-01f);
  q = horner_step(q, u, 4.188549221e-01f);
  q = horner_step(q, u, -4.282697439e-01f);
  q = horner_step(q, u, 2.913308516e-02f);
  q = horner_step(q, u, 5.610240102e-01f);
  q = horner_step(q, u, 1.459026389e-04f);
  const float far = 1.0f - vexp(-(large * large)) * q;
  const float magnitude = a < 2.0f ? near : (a < 4.5f ? far : 1.0f);
  return x != x ? x : (x < 0.0f ? -magnitude : magnitude);
}

// y[i] = vexp(x[i]), y[i] = verf(x[i]) and y[i] = 1 / (1 + e^-x[i]) for i in [0, n); y may be
// x. erf_n skips verf's branch for |x| >= 2 in runs of elements that have none (the same
// results, sooner).
void exp_n(const float* x, float* y, int64_t n);
void erf_n(const float* x, float* y, int64_t n);
void sigmoid_n(const float* x, float* y, int64_t n);

}  // namespace piper::engine::cpu
