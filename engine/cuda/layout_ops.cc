// Layout ops on CUDA, which move elements without arithmetic: Reshape, Flatten,
// Identity, Squeeze, Unsqueeze (a copy; shapes come from the plan), Transpose,
// Expand, Tile, Concat, Split, and the data-parallel piper.Accumulate and piper.Shard.
// Checks follow engine/cpu/shape_ops.cc, layout_ops.cc and data_parallel.cc. All but
// piper.Accumulate (float32) move elements of any dtype, bfloat16 included.
#include "engine/cpu/op_checks.h"
#include "engine/cpu/strided_loop.h"
#include "engine/cuda/check.h"
#include "engine/cuda/ops.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

std::unique_ptr<PreparedKernel> reshape_factory(const KernelArgs& args, CudaContext& context) {
  cpu::check_copy(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
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
  const std::vector<int64_t> strides = cpu::check_transpose(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  return strided_copy_kernel(
      context, strided_index(y.shape, {cpu::contiguous_strides(y.shape), strides}), x, y);
}

std::unique_ptr<PreparedKernel> expand_factory(const KernelArgs& args, CudaContext& context) {
  cpu::check_expand(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
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

Joined joined_parts(const cpu::JoinGeometry& geometry, const TensorView& joined,
                    const std::vector<void*>& parts) {
  Joined j;
  j.rows = static_cast<size_t>(geometry.outer);
  j.row_bytes = geometry.joined_row;
  size_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    j.parts.push_back({static_cast<char*>(joined.data) + offset, static_cast<char*>(parts[i]),
                       geometry.part_rows[i]});
    offset += geometry.part_rows[i];
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
  const cpu::JoinGeometry geometry = cpu::check_concat(args);
  std::vector<void*> parts;
  for (size_t i = 0; i < args.num_inputs(); ++i) parts.push_back(args.input(i).data);
  return join_kernel(context, joined_parts(geometry, args.output(0), parts), true);
}

// Split: the part sizes are the outputs'; a `split` input, when given, must agree with them.
std::unique_ptr<PreparedKernel> split_factory(const KernelArgs& args, CudaContext& context) {
  const cpu::JoinGeometry geometry = cpu::check_split(args);
  std::vector<void*> parts;
  for (size_t i = 0; i < args.num_outputs(); ++i) parts.push_back(args.output(i).data);
  if (args.has_input(1)) {
    const TensorView& split = args.input(1);
    std::vector<int64_t> sizes(static_cast<size_t>(split.elements()));
    copy_to_host(context, sizes.data(), split.data, split.bytes());
    cpu::check_split_sizes(args, geometry, sizes);
  }
  return join_kernel(context, joined_parts(geometry, args.input(0), parts), false);
}

// piper.Accumulate(X) -> Y: Y += X.
std::unique_ptr<PreparedKernel> accumulate_factory(const KernelArgs& args, CudaContext& context) {
  cpu::check_accumulate(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  const Shape flat = {y.elements()};
  const StridedIndex index = broadcast_index(flat, {flat, flat});
  return make_kernel([&context, index, fx = float_view(x), fy = float_view(y)](const StepContext&) {
    launch_float_binary(Binary::kAdd, index, fy, fx, fy, context.stream());
  });
}

// piper.Shard(X) -> Y: elements [i*k, (i+1)*k) of flat X, zero past its end.
std::unique_ptr<PreparedKernel> shard_factory(const KernelArgs& args, CudaContext& context) {
  const cpu::ShardRange range = cpu::check_shard(args);
  const TensorView& y = args.output(0);
  const size_t width = dtype_size(y.dtype);
  return make_kernel([&context,
                      src = static_cast<const char*>(args.input(0).data) + range.begin * width,
                      dst = static_cast<char*>(y.data), used = range.count * width,
                      total = y.bytes()](const StepContext&) {
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
