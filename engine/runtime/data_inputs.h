// What a plan reads of each step's global batch, shared by the batch sources (data.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/runtime/batch.h"
#include "schemas/plan.pb.h"

namespace piper::engine {

// One graph input the plan reads: its dtype, the shape of one sample, and the rows of the
// global batch this rank reads (those it feeds, and every row of inputs whose labels it counts).
struct InputSpec {
  std::string name;
  plan::DType dtype = plan::FLOAT32;
  Shape row_shape;
  int64_t int_high = 0;                           // the plan's exclusive bound of int64 values
  std::vector<std::pair<int64_t, int64_t>> rows;  // sorted, disjoint [begin, end) ranges
};

// Every graph input the plan reads: those it feeds rows of and those whose labels it counts.
// Throws piper::Error when the plan feeds one name to tensors of different dtype or sample
// shape, or feeds a scalar.
std::vector<InputSpec> input_specs(const plan::Plan& plan);

// "[samples, 32]" for samples of shape [32].
std::string sample_shape_string(const Shape& row_shape);

// A zeroed batch of `rows` samples of `spec`.
HostTensor empty_batch(const InputSpec& spec, int64_t rows);

// Calls visit(row) for each row of the global batch that `spec` reads, in order.
template <typename Visit>
void for_each_row(const InputSpec& spec, Visit&& visit) {
  for (const auto& [begin, end] : spec.rows) {
    for (int64_t row = begin; row < end; ++row) visit(row);
  }
}

// splitmix64: a small, well-mixed generator; enough for synthetic data.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1].
  double uniform() { return (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// One draw of splitmix64 from the state a ^ (b * 0xd1b54a32d192ed03) (mod 2**64): a value
// keyed by the pair, as seeded data needs (docs/user-guide.md spells it out for token windows).
inline uint64_t mix(uint64_t a, uint64_t b) {
  return SplitMix64(a ^ (b * 0xd1b54a32d192ed03ull)).next();
}

}  // namespace piper::engine
