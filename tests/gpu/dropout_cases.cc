// Dropout and its gradient: training (the CUDA masks must be the CPU's bit for bit, over two
// steps), as a block of a whole tensor (a DropoutKey), outside training (a copy), a ratio of 0
// and of 1, the default ratio.
#include "tests/gpu/cases.h"

namespace piper::engine::testing {
namespace {

TensorSpec Ratio(double ratio) { return Values({}, plan::FLOAT32, {ratio}); }
TensorSpec Training(bool training) { return Values({}, plan::BOOL, {training ? 1.0 : 0.0}); }

// Rows 4.. and columns 8.. of a [16, 6, 24] tensor, as replicas and tensor-parallel blocks place
// a [4, 6, 12] instance.
plan::DropoutKey Block() {
  plan::DropoutKey key;
  key.set_node(0x5eed);
  for (int64_t extent : {16, 6, 24}) key.add_whole_shape(extent);
  for (int64_t start : {4, 0, 8}) key.add_offset(start);
  return key;
}

}  // namespace

std::vector<OpCase> DropoutCases() {
  return {
      {"Dropout_training",
       "Dropout",
       {},
       {F({64, 33}), Ratio(0.3), Training(true)},
       {F({64, 33}), B({64, 33})},
       1e-5,
       1e-6,
       2},
      {"Dropout_block",
       "Dropout",
       {},
       {F({4, 6, 12}), Ratio(0.4), Training(true)},
       {F({4, 6, 12}), B({4, 6, 12})},
       1e-5,
       1e-6,
       2,
       Block()},
      {"Dropout_seeded",
       "Dropout",
       {Int("seed", 5)},
       {F({1000}), Omitted(), Training(true)},
       {F({1000})}},
      {"Dropout_inference", "Dropout", {}, {F({7, 5}), Ratio(0.3)}, {F({7, 5}), B({7, 5})}},
      {"Dropout_ratio_zero", "Dropout", {}, {F({9}), Ratio(0.0), Training(true)}, {F({9}), B({9})}},
      {"Dropout_ratio_one", "Dropout", {}, {F({9}), Ratio(1.0), Training(true)}, {F({9}), B({9})}},
      {"DropoutGrad_training",
       "piper.DropoutGrad",
       {},
       {F({6, 7}), B({6, 7}), Ratio(0.25), Training(true)},
       {F({6, 7})}},
      {"DropoutGrad_inference", "piper.DropoutGrad", {}, {F({6, 7}), B({6, 7})}, {F({6, 7})}},
  };
}

}  // namespace piper::engine::testing
