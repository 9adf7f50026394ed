// Kernels the data-parallel rewrites use: gradient accumulation over
// microbatches and taking this rank's slice of a tensor.
#include <algorithm>
#include <cstring>

#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/op_checks.h"

namespace piper::engine::cpu {
namespace {

// piper.Accumulate(X) -> Y: Y += X (Y is zeroed at the start of each step).
std::unique_ptr<PreparedKernel> accumulate_factory(const KernelArgs& args) {
  check_accumulate(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  return make_kernel(
      [n = y.elements(), px = x.as<const float>(), py = y.as<float>()](const StepContext&) {
        for (int64_t i = 0; i < n; ++i) py[i] += px[i];
      });
}

// piper.Shard(X) -> Y: Y = elements [i*k, (i+1)*k) of flat X, zero past its end,
// where k = numel(Y), i = shard_index < num_shards and num_shards*k >= numel(X).
std::unique_ptr<PreparedKernel> shard_factory(const KernelArgs& args) {
  const ShardRange range = check_shard(args);
  const TensorView& y = args.output(0);
  const size_t width = dtype_size(y.dtype);
  return make_kernel([src = args.input(0).as<const uint8_t>() + range.begin * width,
                      dst = y.as<uint8_t>(), used = range.count * width,
                      total = y.bytes()](const StepContext&) {
    std::memcpy(dst, src, used);
    std::memset(dst + used, 0, total - used);
  });
}

}  // namespace

void check_accumulate(const KernelArgs& args) {
  check_float_unary(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  if (x.elements() != y.elements()) {
    args.fail("input 0 has " + std::to_string(x.elements()) + " elements but output 0 has " +
              std::to_string(y.elements()));
  }
}

ShardRange check_shard(const KernelArgs& args) {
  args.expect_inputs(1, 1);
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, y.dtype, "input 0");
  const int64_t shards = args.attributes().get_int("num_shards", 0);
  const int64_t index = args.attributes().get_int("shard_index", -1);
  const int64_t k = y.elements();
  if (shards < 1 || index < 0 || index >= shards || shards * k < x.elements()) {
    args.fail("shard " + std::to_string(index) + " of " + std::to_string(shards) + " with " +
              std::to_string(k) + " elements cannot cover an input of " +
              std::to_string(x.elements()));
  }
  ShardRange range;
  range.begin = std::min(index * k, x.elements());
  range.count = std::min(k, x.elements() - range.begin);
  return range;
}

void register_data_parallel_kernels(KernelTable& table) {
  table["piper.Accumulate"] = accumulate_factory;
  table["piper.Shard"] = shard_factory;
}

}  // namespace piper::engine::cpu
