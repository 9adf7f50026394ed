// Layout kernels. Reshape, Flatten, Identity, Squeeze and Unsqueeze keep the
// bytes (their output shape comes from the plan; shape/axes inputs are ignored);
// Transpose permutes dimensions.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/op_checks.h"
#include "engine/cpu/parallel.h"
#include "engine/cpu/strided_loop.h"

namespace piper::engine::cpu {
namespace {

std::unique_ptr<PreparedKernel> copy_factory(const KernelArgs& args) {
  check_copy(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  return make_kernel(
      [bytes = y.bytes(), src = x.as<const uint8_t>(), dst = y.as<uint8_t>()](const StepContext&) {
        if (src == dst || bytes == 0) return;
        if (src < dst + bytes && dst < src + bytes) {  // overlapping buffers: one memmove
          std::memmove(dst, src, bytes);
          return;
        }
        const auto n = static_cast<int64_t>(bytes);
        parallel_for(n, kParallelGrain * 4, [&](int64_t begin, int64_t end) {
          std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin));
        });
      });
}

// Edge of the square tiles a transpose copies at a time. A tile is read row by row (contiguous
// pieces of the input) into a local buffer and written out row by row from it: every cache
// line of the input and of the output is touched once, however the input's and the output's
// row strides map onto cache sets (strides of 4 KiB would make a direct tile-to-tile copy
// evict its own lines).
constexpr int64_t kTile = 32;

// Y = X with dimensions permuted; `strides` are X's strides along Y's dimensions. When Y's
// innermost dimension is X's innermost too, rows are plain strided copies; otherwise each
// matrix between the two innermost dimensions is copied tile by tile.
template <typename T>
std::unique_ptr<PreparedKernel> make_transpose(const TensorView& x, const TensorView& y,
                                               const std::vector<int64_t>& strides) {
  const auto rank = static_cast<int64_t>(y.rank());
  const std::vector<int64_t> y_strides = contiguous_strides(y.shape);
  // q: Y's dimension that is X's innermost (X stride 1); last: Y's innermost.
  int64_t q = -1;
  for (int64_t d = 0; d < rank; ++d) {
    if (strides[d] == 1 && y.shape[d] > 1) q = d;
  }
  const int64_t last = rank - 1;
  if (q < 0 || q == last || y.shape[last] == 1) {
    const StridedLoop loop(y.shape, {y_strides, strides});
    return make_kernel([loop, px = x.as<const T>(), py = y.as<T>()](const StepContext&) {
      strided_copy(loop, px, py);
    });
  }
  // The matrices: Y[..., a (dim q), ..., b (dim last)] = X[... a + b * x_b ...].
  Shape batch = y.shape;
  batch[q] = batch[last] = 1;
  const StridedLoop matrices(batch, {y_strides, strides});
  std::vector<int64_t> y_offsets, x_offsets;
  matrices.for_each_row([&](const int64_t* offsets, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      y_offsets.push_back(offsets[0] + i * matrices.inner_stride(0));
      x_offsets.push_back(offsets[1] + i * matrices.inner_stride(1));
    }
  });
  const int64_t rows = y.shape[q], cols = y.shape[last];
  const int64_t y_row = y_strides[q], x_col = strides[last];
  const int64_t tiles = (rows + kTile - 1) / kTile;
  return make_kernel([y_offsets, x_offsets, rows, cols, y_row, x_col, tiles, px = x.as<const T>(),
                      py = y.as<T>()](const StepContext&) {
    const auto count = static_cast<int64_t>(y_offsets.size()) * tiles;
    parallel_for(count, (kParallelGrain + kTile * cols - 1) / (kTile * cols),
                 [&](int64_t begin, int64_t end) {
                   T tile[kTile][kTile];
                   for (int64_t t = begin; t < end; ++t) {
                     const auto m = static_cast<size_t>(t / tiles);
                     const int64_t a0 = t % tiles * kTile, a1 = std::min(rows, a0 + kTile);
                     T* out = py + y_offsets[m];
                     const T* in = px + x_offsets[m];
                     for (int64_t b0 = 0; b0 < cols; b0 += kTile) {
                       const int64_t b1 = std::min(cols, b0 + kTile);
                       for (int64_t b = b0; b < b1; ++b) {
                         std::memcpy(tile[b - b0], in + a0 + b * x_col,
                                     static_cast<size_t>(a1 - a0) * sizeof(T));
                       }
                       for (int64_t a = a0; a < a1; ++a) {
                         T* row = out + a * y_row;
                         for (int64_t b = b0; b < b1; ++b) row[b] = tile[b - b0][a - a0];
                       }
                     }
                   }
                 });
  });
}

std::unique_ptr<PreparedKernel> transpose_factory(const KernelArgs& args) {
  const std::vector<int64_t> strides = check_transpose(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  switch (dtype_size(y.dtype)) {
    case 8:
      return make_transpose<uint64_t>(x, y, strides);
    case 4:
      return make_transpose<uint32_t>(x, y, strides);
    default:
      return make_transpose<uint8_t>(x, y, strides);
  }
}

}  // namespace

void check_copy(const KernelArgs& args) {
  if (args.num_inputs() < 1) args.fail("takes a data input, the plan gives none");
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, y.dtype, "input 0");
  if (x.elements() != y.elements()) {
    args.fail("input 0 " + shape_string(x.shape) + " has " + std::to_string(x.elements()) +
              " elements but output 0 " + shape_string(y.shape) + " has " +
              std::to_string(y.elements()));
  }
}

std::vector<int64_t> check_transpose(const KernelArgs& args) {
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
  return strides;
}

void register_shape_kernels(KernelTable& table) {
  for (const char* op : {"Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze"}) {
    table[op] = copy_factory;
  }
  table["Transpose"] = transpose_factory;
}

}  // namespace piper::engine::cpu
