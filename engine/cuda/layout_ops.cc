// Layout ops on CUDA, which move elements without arithmetic: Reshape, Flatten,
// Identity, Squeeze, Unsqueeze (a copy; shapes come from the plan), Transpose,
// Expand, Tile, Concat, Split, and the data-parallel piper.Accumulate and piper.Shard.
// Checks follow engine/cpu/shape_ops.cc, layout_ops.cc and data_parallel.cc. All but
// piper.Accumulate (float32) move elements of any dtype, bfloat16 included.
#include <numeric>

#include "engine/cpu/op_checks.h"
#include "engine/cpu/strided_loop.h"
#include "engine/cuda/check.h"
#include "engine/cuda/ops.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

std::unique_ptr<PreparedKernel> reshape_factory(const KernelArgs& args, CudaContext& context) {
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
  return copy_kernel(context, x.data, y.data, y.bytes());
}

std::unique_ptr<PreparedKernel> strided_copy_kernel(CudaContext& context, const StridedIndex& index,
                                                    const TensorView& x, const TensorView& y) {
  return make_kernel(
      [&context, index, width = dtype_size(y.dtype), px = x.data, py = y.data](const StepContext&) {
        launch_strided_copy(index, width, px, py, context.stream());
      });
}

std::unique_ptr<PreparedKernel> transpose_factory(const KernelArgs& args, CudaContext& context) {
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
  const std::vector<int64_t> x_strides = cpu::contiguous_strides(x.shape);
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
  return strided_copy_kernel(
      context, strided_index(y.shape, {cpu::contiguous_strides(y.shape), strides}), x, y);
}

std::unique_ptr<PreparedKernel> expand_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(1, 2);
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, y.dtype, "input 0");
  if (!cpu::broadcasts_to(x.shape, y.shape)) {
    args.fail("input " + shape_string(x.shape) + " does not broadcast to the output " +
              shape_string(y.shape));
  }
  return strided_copy_kernel(context, broadcast_index(y.shape, {x.shape}), x, y);
}

std::unique_ptr<PreparedKernel> tile_factory(const KernelArgs& args, CudaContext& context) {
  const cpu::TileWalk walk = cpu::check_tile(args);
  return strided_copy_kernel(context,
                             strided_index(walk.shape, {walk.output_strides, walk.input_strides}),
                             args.input(0), args.output(0));
}

// Concat and Split: each part is a block of rows (one per index of the dimensions before
// the axis) of the joined tensor, copied as one 2-D memcpy.
struct Part {
  char* joined = nullptr;  // the part's first row within the joined tensor
  char* part = nullptr;
  size_t row_bytes = 0;
};

struct Joined {
  size_t rows = 1, row_bytes = 0;
  std::vector<Part> parts;
};

Joined joined_parts(const KernelArgs& args, const TensorView& joined,
                    const std::vector<TensorView>& parts, const std::string& part_kind) {
  if (joined.rank() == 0) args.fail("cannot concatenate or split a scalar");
  const int64_t axis = args.normalize_axis(args.attributes().get_int("axis", 0), joined.rank());
  const size_t element = dtype_size(joined.dtype);
  const int64_t inner = product(joined.shape, axis + 1, joined.shape.size());
  Joined j;
  j.rows = static_cast<size_t>(product(joined.shape, 0, axis));
  j.row_bytes = static_cast<size_t>(joined.shape[axis] * inner) * element;
  int64_t total = 0;
  size_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const TensorView& part = parts[i];
    const std::string what = part_kind + " " + std::to_string(i);
    args.expect_dtype(part, joined.dtype, what);
    Shape expected = joined.shape;
    expected[axis] = part.rank() == joined.rank() ? part.shape[axis] : -1;
    if (part.shape != expected) {
      args.fail(what + " has shape " + shape_string(part.shape) + ", which does not match " +
                shape_string(joined.shape) + " outside axis " + std::to_string(axis));
    }
    total += part.shape[axis];
    const size_t row = static_cast<size_t>(part.shape[axis] * inner) * element;
    j.parts.push_back(
        {static_cast<char*>(joined.data) + offset, static_cast<char*>(part.data), row});
    offset += row;
  }
  if (total != joined.shape[axis]) {
    args.fail("the " + part_kind + "s add up to " + std::to_string(total) + " along axis " +
              std::to_string(axis) + " but the joined tensor has " +
              std::to_string(joined.shape[axis]));
  }
  return j;
}

std::unique_ptr<PreparedKernel> join_kernel(CudaContext& context, Joined j, bool concat) {
  return make_kernel([&context, j, concat](const StepContext&) {
    for (const Part& p : j.parts) {
      if (p.row_bytes == 0 || j.rows == 0) continue;
      if (concat) {
        PIPER_CUDA_CHECK(cudaMemcpy2DAsync(p.joined, j.row_bytes, p.part, p.row_bytes, p.row_bytes,
                                           j.rows, cudaMemcpyDeviceToDevice, context.stream()));
      } else {
        PIPER_CUDA_CHECK(cudaMemcpy2DAsync(p.part, p.row_bytes, p.joined, j.row_bytes, p.row_bytes,
                                           j.rows, cudaMemcpyDeviceToDevice, context.stream()));
      }
    }
  });
}

std::unique_ptr<PreparedKernel> concat_factory(const KernelArgs& args, CudaContext& context) {
  if (args.num_inputs() < 1) args.fail("takes at least one input, the plan gives none");
  args.expect_outputs(1, 1);
  std::vector<TensorView> parts;
  for (size_t i = 0; i < args.num_inputs(); ++i) parts.push_back(args.input(i));
  return join_kernel(context, joined_parts(args, args.output(0), parts, "input"), true);
}

// Split: the part sizes are the outputs'; a `split` input, when given, must agree with them.
std::unique_ptr<PreparedKernel> split_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(1, 2);
  if (args.num_outputs() < 1) args.fail("produces at least one output, the plan gives none");
  const TensorView& x = args.input(0);
  std::vector<TensorView> parts;
  for (size_t i = 0; i < args.num_outputs(); ++i) parts.push_back(args.output(i));
  Joined j = joined_parts(args, x, parts, "output");
  if (args.has_input(1)) {
    const TensorView& split = args.input(1);
    args.expect_dtype(split, plan::INT64, "split (input 1)");
    const int64_t axis = args.normalize_axis(args.attributes().get_int("axis", 0), x.rank());
    std::vector<int64_t> values(static_cast<size_t>(split.elements()));
    copy_to_host(context, values.data(), split.data, split.bytes());
    bool agree = values.size() == parts.size();
    for (size_t i = 0; agree && i < parts.size(); ++i) agree = values[i] == parts[i].shape[axis];
    if (!agree) {
      args.fail("split (input 1) " + shape_string(values) +
                " does not match the outputs' sizes along axis " + std::to_string(axis));
    }
  }
  return join_kernel(context, std::move(j), false);
}

// piper.Accumulate(X) -> Y: Y += X.
std::unique_ptr<PreparedKernel> accumulate_factory(const KernelArgs& args, CudaContext& context) {
  args.expect_inputs(1, 1);
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, plan::FLOAT32, "input 0");
  args.expect_dtype(y, plan::FLOAT32, "output 0");
  if (x.elements() != y.elements()) {
    args.fail("input 0 has " + std::to_string(x.elements()) + " elements but output 0 has " +
              std::to_string(y.elements()));
  }
  const Shape flat = {y.elements()};
  const StridedIndex index = broadcast_index(flat, {flat, flat});
  return make_kernel([&context, index, fx = float_view(x), fy = float_view(y)](const StepContext&) {
    launch_float_binary(Binary::kAdd, index, fy, fx, fy, context.stream());
  });
}

// piper.Shard(X) -> Y: elements [i*k, (i+1)*k) of flat X, zero past its end.
std::unique_ptr<PreparedKernel> shard_factory(const KernelArgs& args, CudaContext& context) {
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
  const int64_t begin = std::min(index * k, x.elements());
  const int64_t count = std::min(k, x.elements() - begin);
  const size_t width = dtype_size(y.dtype);
  return make_kernel([&context, src = static_cast<const char*>(x.data) + begin * width,
                      dst = static_cast<char*>(y.data), used = count * width,
                      total = k * width](const StepContext&) {
    const cudaStream_t stream = context.stream();
    if (used > 0) {
      PIPER_CUDA_CHECK(cudaMemcpyAsync(dst, src, used, cudaMemcpyDeviceToDevice, stream));
    }
    if (total > used) PIPER_CUDA_CHECK(cudaMemsetAsync(dst + used, 0, total - used, stream));
  });
}

}  // namespace

void register_layout_kernels(CudaKernelTable& table) {
  for (const char* op : {"Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze"}) {
    table[op] = reshape_factory;
  }
  table["Transpose"] = transpose_factory;
  table["Expand"] = expand_factory;
  table["Tile"] = tile_factory;
  table["Concat"] = concat_factory;
  table["Split"] = split_factory;
  table["piper.Accumulate"] = accumulate_factory;
  table["piper.Shard"] = shard_factory;
}

}  // namespace piper::engine::cuda
