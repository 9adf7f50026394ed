// Layout kernels. Reshape, Flatten, Identity, Squeeze and Unsqueeze keep the
// bytes (their output shape comes from the plan; shape/axes inputs are ignored);
// Transpose permutes dimensions.
#include <cstring>
#include <numeric>

#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/strided_loop.h"

namespace piper::engine::cpu {
namespace {

std::unique_ptr<PreparedKernel> copy_factory(const KernelArgs& args) {
  if (args.num_inputs() < 1) {
    args.fail("takes a data input, the plan gives none");
  }
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, y.dtype, "input 0");
  if (x.elements() != y.elements()) {
    args.fail("input 0 " + shape_string(x.shape) + " has " + std::to_string(x.elements()) +
              " elements but output 0 " + shape_string(y.shape) + " has " +
              std::to_string(y.elements()));
  }
  return make_kernel([bytes = y.bytes(), src = x.data, dst = y.data](const StepContext&) {
    if (src != dst && bytes != 0) std::memmove(dst, src, bytes);
  });
}

template <typename T>
std::unique_ptr<PreparedKernel> make_transpose(const StridedLoop& loop, const TensorView& x,
                                               const TensorView& y) {
  return make_kernel([loop, px = x.as<const T>(), py = y.as<T>()](const StepContext&) {
    const int64_t s = loop.inner_stride(1);
    loop.for_each_row([&](const int64_t* offsets, int64_t n) {
      T* out = py + offsets[0];
      const T* in = px + offsets[1];
      for (int64_t i = 0; i < n; ++i) out[i] = in[i * s];
    });
  });
}

std::unique_ptr<PreparedKernel> transpose_factory(const KernelArgs& args) {
  args.expect_inputs(1, 1);
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, y.dtype, "input 0");
  std::vector<int64_t> reversed(x.shape.size());
  std::iota(reversed.rbegin(), reversed.rend(), 0);
  const std::vector<int64_t> perm = args.attributes().get_ints("perm", reversed);
  if (perm.size() != x.shape.size()) {
    args.fail("perm has " + std::to_string(perm.size()) + " entries for an input of rank " +
              std::to_string(x.rank()));
  }
  std::vector<bool> seen(perm.size(), false);
  const std::vector<int64_t> x_strides = contiguous_strides(x.shape);
  Shape expected;
  std::vector<int64_t> strides;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.rank() || seen[p]) {
      args.fail("perm " + shape_string(perm) + " is not a permutation of 0.." +
                std::to_string(x.rank() - 1));
    }
    seen[p] = true;
    expected.push_back(x.shape[p]);
    strides.push_back(x_strides[p]);
  }
  if (expected != y.shape) {
    args.fail("transposing " + shape_string(x.shape) + " by perm " + shape_string(perm) +
              " gives " + shape_string(expected) + " but the output has shape " +
              shape_string(y.shape));
  }
  const StridedLoop loop(y.shape, {contiguous_strides(y.shape), strides});
  switch (dtype_size(y.dtype)) {
    case 8:
      return make_transpose<uint64_t>(loop, x, y);
    case 4:
      return make_transpose<uint32_t>(loop, x, y);
    default:
      return make_transpose<uint8_t>(loop, x, y);
  }
}

}  // namespace

void register_shape_kernels(KernelTable& table) {
  for (const char* op : {"Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze"}) {
    table[op] = copy_factory;
  }
  table["Transpose"] = transpose_factory;
}

}  // namespace piper::engine::cpu
