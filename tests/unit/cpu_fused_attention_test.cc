// CPU piper.FusedAttention and piper.FusedAttentionGrad against attention computed in double,
// with masks that leave keys out of whole blocks of query rows (which the kernels skip) and
// masks whose left-out keys keep a nonzero probability (which they must not skip).
#include <gmock/gmock.h>

#include <cmath>
#include <limits>

#include "engine_test_util.h"

namespace piper::engine::testing {
namespace {

constexpr int64_t kHeads = 2, kRows = 70, kKeys = 70, kWidth = 8;
constexpr float kScale = 0.6f;

// A mask over [kRows, kKeys], or [kHeads, kRows, kKeys] where it holds kHeads times as many
// values: bool (fill where true) or additive.
struct MaskCase {
  std::string name;
  std::vector<uint8_t> filled;  // bool masks
  std::vector<float> added;     // additive masks
  float fill = 0;
};

void PrintTo(const MaskCase& c, std::ostream* os) { *os << c.name; }

// Keys after i + ahead filled in query row i.
std::vector<uint8_t> causal_filled(int64_t ahead = 0) {
  std::vector<uint8_t> filled(kRows * kKeys);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kKeys; ++j) filled[i * kKeys + j] = j > i + ahead;
  }
  return filled;
}

std::vector<MaskCase> mask_cases() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<MaskCase> all;
  all.push_back({"causal_fill_minus_infinity", causal_filled(), {}, -inf});
  all.push_back({"causal_fill_float_lowest", causal_filled(), {}, -3.4028234663852886e38f});
  // exp(−2 − max) is not 0: every key keeps a probability.
  all.push_back({"causal_fill_minus_two", causal_filled(), {}, -2.0f});
  // Above every score (|score| <= 0.6 · 8): a row that fills no key has a maximum below it.
  all.push_back({"causal_fill_above_every_score", causal_filled(), {}, 5.0f});
  // The first rows leave every key out (uniform probabilities): their block computes all keys.
  std::vector<uint8_t> first_rows_blind = causal_filled();
  std::fill(first_rows_blind.begin(), first_rows_blind.begin() + 5 * kKeys, uint8_t{1});
  all.push_back({"causal_with_blind_rows_fill_minus_1e9", first_rows_blind, {}, -1e9f});
  // Padding: keys from 50 on added −∞ in every row; a random bias elsewhere.
  std::vector<float> padding = TestValues(kRows * kKeys, 7);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 50; j < kKeys; ++j) padding[i * kKeys + j] = -inf;
  }
  all.push_back({"additive_padding_minus_infinity", {}, padding, 0});
  // A mask per head: the heads' blocks leave out other keys.
  std::vector<uint8_t> per_head = causal_filled();
  const std::vector<uint8_t> ahead = causal_filled(20);
  per_head.insert(per_head.end(), ahead.begin(), ahead.end());
  all.push_back({"causal_per_head_fill_minus_infinity", per_head, {}, -inf});
  return all;
}

// Where the mask holds key j of query row i of head h.
int64_t mask_index(const MaskCase& c, int64_t h, int64_t i, int64_t j) {
  const bool per_head = std::max(c.filled.size(), c.added.size()) == size_t{kHeads * kRows * kKeys};
  return (per_head ? h * kRows * kKeys : 0) + i * kKeys + j;
}

double score(const MaskCase& c, const std::vector<float>& q, const std::vector<float>& kt,
             int64_t h, int64_t i, int64_t j) {
  double s = 0;
  for (int64_t e = 0; e < kWidth; ++e) {
    s += static_cast<double>(q[(h * kRows + i) * kWidth + e]) * kt[(h * kWidth + e) * kKeys + j];
  }
  s *= kScale;
  if (!c.added.empty()) return s + c.added[mask_index(c, h, i, j)];
  return c.filled[mask_index(c, h, i, j)] ? c.fill : s;
}

// Attention and its gradients in double.
struct Reference {
  std::vector<double> y, row_max, dq, dkt, dv;
};

Reference reference(const MaskCase& c, const std::vector<float>& q, const std::vector<float>& kt,
                    const std::vector<float>& v, const std::vector<float>& dy) {
  Reference r;
  r.y.assign(kHeads * kRows * kWidth, 0.0);
  r.dq.assign(kHeads * kRows * kWidth, 0.0);
  r.dkt.assign(kHeads * kWidth * kKeys, 0.0);
  r.dv.assign(kHeads * kKeys * kWidth, 0.0);
  for (int64_t h = 0; h < kHeads; ++h) {
    for (int64_t i = 0; i < kRows; ++i) {
      std::vector<double> p(kKeys);
      double max = -INFINITY, sum = 0;
      for (int64_t j = 0; j < kKeys; ++j) max = std::max(max, p[j] = score(c, q, kt, h, i, j));
      r.row_max.push_back(max);
      for (double& x : p) sum += x = std::exp(x - max);
      std::vector<double> dp(kKeys, 0.0);
      double dot = 0;
      for (int64_t j = 0; j < kKeys; ++j) {
        p[j] /= sum;
        for (int64_t e = 0; e < kWidth; ++e) {
          const double dye = dy[(h * kRows + i) * kWidth + e];
          r.y[(h * kRows + i) * kWidth + e] += p[j] * v[(h * kKeys + j) * kWidth + e];
          r.dv[(h * kKeys + j) * kWidth + e] += p[j] * dye;
          dp[j] += dye * v[(h * kKeys + j) * kWidth + e];
        }
        dot += dp[j] * p[j];
      }
      for (int64_t j = 0; j < kKeys; ++j) {
        const bool filled = !c.filled.empty() && c.filled[mask_index(c, h, i, j)];
        const double ds = filled ? 0.0 : p[j] * (dp[j] - dot) * kScale;
        for (int64_t e = 0; e < kWidth; ++e) {
          r.dq[(h * kRows + i) * kWidth + e] += ds * kt[(h * kWidth + e) * kKeys + j];
          r.dkt[(h * kWidth + e) * kKeys + j] += ds * q[(h * kRows + i) * kWidth + e];
        }
      }
    }
  }
  return r;
}

class CpuFusedAttention : public ::testing::TestWithParam<MaskCase> {};

// Outputs start as NaN, so that an element a skipped block leaves unwritten shows; the backward
// runs with and without the forward's Y (which changes how a row's Σ dP·P is formed).
TEST_P(CpuFusedAttention, MaskedKeysSkippedOrNotMatchDoubleAttention) {
  const MaskCase& c = GetParam();
  const auto q = TestValues(kHeads * kRows * kWidth, 1),
             kt = TestValues(kHeads * kWidth * kKeys, 2);
  const auto v = TestValues(kHeads * kKeys * kWidth, 3),
             dy = TestValues(kHeads * kRows * kWidth, 4);
  const Reference want = reference(c, q, kt, v, dy);
  const std::vector<float> nan(kHeads * kRows * kKeys, std::numeric_limits<float>::quiet_NaN());
  const auto nans = [&](int64_t n) { return std::vector<float>(nan.begin(), nan.begin() + n); };

  KernelRunner r;
  const int iq = r.Input({kHeads, kRows, kWidth}, q), ikt = r.Input({kHeads, kWidth, kKeys}, kt);
  const int iv = r.Input({kHeads, kKeys, kWidth}, v), idy = r.Input({kHeads, kRows, kWidth}, dy);
  const Shape mask_shape =
      mask_index(c, 1, 0, 0) == 0 ? Shape{kRows, kKeys} : Shape{kHeads, kRows, kKeys};
  const int mask =
      c.added.empty() ? r.BoolInput(mask_shape, c.filled) : r.Input(mask_shape, c.added);
  std::vector<plan::Attribute> attributes = {Float("scale", kScale)};
  if (c.added.empty()) attributes.push_back(Float("fill", c.fill));
  const int y = r.Output({kHeads, kRows, kWidth});
  const int row_max = r.Output({kHeads, kRows}), row_inv_sum = r.Output({kHeads, kRows});
  r.Set(y, nans(kHeads * kRows * kWidth));
  r.Run("piper.FusedAttention", {iq, ikt, iv, mask}, {y, row_max, row_inv_sum}, attributes);
  ExpectNear(r.Floats(y), want.y, 1e-5, c.name + ": Y", 1e-5);
  ExpectNear(r.Floats(row_max), want.row_max, 1e-5, c.name + ": RowMax", 1e-5);

  for (const bool with_y : {true, false}) {
    const std::string label = c.name + (with_y ? " (given Y)" : " (without Y)");
    const int dq = r.Output({kHeads, kRows, kWidth}), dkt = r.Output({kHeads, kWidth, kKeys});
    const int dv = r.Output({kHeads, kKeys, kWidth});
    r.Set(dq, nans(kHeads * kRows * kWidth));
    r.Set(dkt, nans(kHeads * kWidth * kKeys));
    r.Set(dv, nans(kHeads * kKeys * kWidth));
    std::vector<int> inputs = {idy, iq, ikt, iv, mask, row_max, row_inv_sum};
    if (with_y) inputs.push_back(y);
    r.Run("piper.FusedAttentionGrad", inputs, {dq, dkt, dv}, attributes);
    ExpectNear(r.Floats(dq), want.dq, 1e-5, label + ": dQ", 1e-5);
    ExpectNear(r.Floats(dkt), want.dkt, 1e-5, label + ": dKt", 1e-5);
    ExpectNear(r.Floats(dv), want.dv, 1e-5, label + ": dV", 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Masks, CpuFusedAttention, ::testing::ValuesIn(mask_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace piper::engine::testing
