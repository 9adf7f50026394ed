#include "engine/cpu/non_zero.h"

#include <algorithm>

#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

// Whether element i is non-zero; NaN is.
bool non_zero(plan::DType dtype, const void* data, int64_t i) {
  switch (dtype) {
    case plan::FLOAT32:
      return static_cast<const float*>(data)[i] != 0.0f;
    case plan::BFLOAT16:  // the sign bit alone is -0
      return (static_cast<const uint16_t*>(data)[i] & 0x7fff) != 0;
    case plan::INT64:
      return static_cast<const int64_t*>(data)[i] != 0;
    default:
      return static_cast<const uint8_t*>(data)[i] != 0;
  }
}

std::unique_ptr<PreparedKernel> non_zero_factory(const KernelArgs& args) {
  check_non_zero(args);
  return make_kernel(
      [x = args.input(0), y = args.output(0),
       count = args.has_output(1) ? args.output(1).as<int64_t>() : nullptr](const StepContext&) {
        const int64_t found = find_non_zero(x, x.data, y.as<int64_t>(), y.shape[1]);
        if (count) *count = found;
      });
}

}  // namespace

void check_non_zero(const KernelArgs& args) {
  args.expect_inputs(1, 1);
  args.expect_outputs(1, 2);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  if (x.dtype != plan::FLOAT32 && x.dtype != plan::BFLOAT16 && x.dtype != plan::INT64 &&
      x.dtype != plan::BOOL) {
    args.fail("input 0 has dtype " + dtype_name(x.dtype) +
              ", expected float32, bfloat16, int64 or bool");
  }
  if (x.rank() == 0) args.fail("input 0 is a scalar; NonZero takes a tensor of rank >= 1");
  args.expect_dtype(y, plan::INT64, "output 0");
  if (y.rank() != 2 || y.shape[0] != x.rank()) {
    args.fail("output 0 has shape " + shape_string(y.shape) + ", expected [" +
              std::to_string(x.rank()) + ", bound]");
  }
  if (args.has_output(1)) {
    args.expect_dtype(args.output(1), plan::INT64, "output 1");
    if (args.output(1).rank() != 0) args.fail("output 1 (the count) must be a scalar");
  }
}

int64_t find_non_zero(const TensorView& x, const void* data, int64_t* indices, int64_t capacity) {
  const int64_t elements = x.elements();
  int64_t count = 0;
  for (int64_t i = 0; i < elements; ++i) count += non_zero(x.dtype, data, i) ? 1 : 0;
  if (count > capacity) {
    throw Error("NonZero: " + std::to_string(count) +
                " non-zero elements exceed the planned bound of " + std::to_string(capacity));
  }
  const int64_t rank = x.rank();
  std::fill(indices, indices + rank * capacity, int64_t{0});
  int64_t found = 0;
  for (int64_t i = 0; i < elements; ++i) {
    if (!non_zero(x.dtype, data, i)) continue;
    int64_t rest = i;
    for (int64_t d = rank; d-- > 0;) {
      indices[d * count + found] = rest % x.shape[static_cast<size_t>(d)];
      rest /= x.shape[static_cast<size_t>(d)];
    }
    ++found;
  }
  return count;
}

void register_non_zero_kernels(KernelTable& table) { table["NonZero"] = non_zero_factory; }

}  // namespace piper::engine::cpu
