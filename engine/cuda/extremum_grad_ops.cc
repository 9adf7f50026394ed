// piper.MaxMinGrad and piper.ReduceMaxGrad on CUDA: dY shared equally among the inputs equal
// to the result. Checks follow engine/cpu/math.cc and reduce.cc.
#include "engine/cpu/op_checks.h"
#include "engine/cpu/strided_loop.h"
#include "engine/cuda/check.h"
#include "engine/cuda/extremum_grad.h"
#include "engine/cuda/ops.h"

namespace piper::engine::cuda {
namespace {

// Zeroes `ties`, counts the ties of each index of `counts` into it, then writes dX.
std::unique_ptr<PreparedKernel> ties_kernel(CudaContext& context, std::vector<StridedIndex> counts,
                                            std::vector<const float*> xs, StridedIndex share,
                                            const float* x, const TensorView& y,
                                            const TensorView& dy, const TensorView& dx,
                                            size_t groups) {
  return make_kernel([&context, counts = std::move(counts), xs = std::move(xs), share, x, groups,
                      ties = device_array<double>(groups), py = y.as<const float>(),
                      pdy = dy.as<const float>(), pdx = dx.as<float>()](const StepContext&) {
    const cudaStream_t stream = context.stream();
    if (groups > 0)
      PIPER_CUDA_CHECK(cudaMemsetAsync(ties.get(), 0, groups * sizeof(double), stream));
    for (size_t k = 0; k < counts.size(); ++k) {
      launch_count_ties(counts[k], xs[k], py, ties.get(), stream);
    }
    launch_share_among_ties(share, x, py, pdy, ties.get(), pdx, stream);
  });
}

// piper.MaxMinGrad(dY, Y, X0, X1, ...), attribute `input` = i: dY · [Xi = Y] / #{j : Xj = Y}.
std::unique_ptr<PreparedKernel> max_min_grad_factory(const KernelArgs& args, CudaContext& context) {
  const auto which = static_cast<size_t>(cpu::check_max_min_grad(args));
  const TensorView& y = args.input(1);
  std::vector<StridedIndex> counts;
  std::vector<const float*> xs;
  for (size_t k = 2; k < args.num_inputs(); ++k) {
    counts.push_back(broadcast_index(y.shape, {args.input(k).shape, y.shape}));
    xs.push_back(args.input(k).as<const float>());
  }
  const StridedIndex share =
      broadcast_index(y.shape, {args.input(which + 2).shape, y.shape, y.shape});
  return ties_kernel(context, std::move(counts), xs, share, xs[which], y, args.input(0),
                     args.output(0), static_cast<size_t>(y.elements()));
}

// piper.ReduceMaxGrad(dY, X, Y): dY · [X = Y] / (the ties in X's reduced group).
std::unique_ptr<PreparedKernel> reduce_max_grad_factory(const KernelArgs& args,
                                                        CudaContext& context) {
  const Shape kept = cpu::check_reduce_max_grad(args);
  const TensorView& x = args.input(1);
  const std::vector<int64_t> group_strides = cpu::broadcast_strides(kept, x.shape);
  const StridedIndex count =
      strided_index(x.shape, {group_strides, cpu::contiguous_strides(x.shape), group_strides});
  return ties_kernel(context, {count}, {x.as<const float>()},
                     broadcast_index(x.shape, {x.shape, kept, kept}), x.as<const float>(),
                     args.input(2), args.input(0), args.output(0),
                     static_cast<size_t>(num_elements(kept)));
}

}  // namespace

void register_extremum_grad_kernels(CudaKernelTable& table) {
  table["piper.MaxMinGrad"] = max_min_grad_factory;
  table["piper.ReduceMaxGrad"] = reduce_max_grad_factory;
}

}  // namespace piper::engine::cuda
