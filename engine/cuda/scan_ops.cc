// CumSum on CUDA, with the CPU kernel's checks (engine/cpu/sequence_ops.cc). The axis input is
// read on the device at run time, as the CPU kernel reads it.
#include <algorithm>

#include "engine/cpu/op_checks.h"
#include "engine/cuda/ops.h"
#include "engine/cuda/scan.h"

namespace piper::engine::cuda {
namespace {

std::unique_ptr<PreparedKernel> cum_sum_factory(const KernelArgs& args, CudaContext& context) {
  cpu::check_cum_sum(args);
  const TensorView& x = args.input(0);
  if (x.rank() > ScanShape::kMaxRank) {
    args.fail("the cuda backend scans tensors of rank " + std::to_string(ScanShape::kMaxRank) +
              " at most, got " + shape_string(x.shape));
  }
  ScanShape shape;
  shape.rank = static_cast<int>(x.rank());
  std::copy(x.shape.begin(), x.shape.end(), shape.sizes);
  shape.elements = x.elements();
  const int32_t fault_code =
      context.fault_code([op = args.op(), rank = x.rank()](int64_t axis, int64_t) {
        return cpu::cum_sum_axis_error(op, axis, rank);
      });
  return make_kernel([&context, shape, fault_code, int64 = x.dtype == plan::INT64,
                      exclusive = args.attributes().get_int("exclusive", 0) != 0,
                      reverse = args.attributes().get_int("reverse", 0) != 0,
                      axis = args.input(1).as<const int64_t>(), px = x.data,
                      py = args.output(0).data](const StepContext&) {
    launch_cum_sum(shape, int64, exclusive, reverse, axis, px, py, context.device_fault(),
                   fault_code, context.stream());
  });
}

}  // namespace

void register_scan_kernels(CudaKernelTable& table) { table["CumSum"] = cum_sum_factory; }

}  // namespace piper::engine::cuda
