// NonZero on CUDA: X copied to the host, the CPU's search (engine/cpu/non_zero.cc), the
// indices and count copied back. The count must reach the host before the kernels it sizes
// are prepared, so the step's stream synchronizes here either way.
#include <vector>

#include "engine/cpu/non_zero.h"
#include "engine/cuda/ops.h"

namespace piper::engine::cuda {
namespace {

std::unique_ptr<PreparedKernel> non_zero_factory(const KernelArgs& args, CudaContext& context) {
  cpu::check_non_zero(args);
  return make_kernel(
      [&context, x = args.input(0), y = args.output(0),
       count = args.has_output(1) ? args.output(1).data : nullptr](const StepContext&) {
        std::vector<uint8_t> host(x.bytes());
        copy_to_host(context, host.data(), x.data, host.size());
        std::vector<int64_t> indices(static_cast<size_t>(y.elements()));
        const int64_t found = cpu::find_non_zero(x, host.data(), indices.data(), y.shape[1]);
        copy_to_device(context, y.data, indices.data(), indices.size() * sizeof(int64_t));
        if (count) copy_to_device(context, count, &found, sizeof(found));
      });
}

}  // namespace

void register_non_zero_kernels(CudaKernelTable& table) { table["NonZero"] = non_zero_factory; }

}  // namespace piper::engine::cuda
