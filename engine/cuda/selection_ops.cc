// ArgMax, ArgMin, TopK, OneHot and Hardmax on CUDA, with the CPU kernels' checks and orders
// (engine/cpu/indexing.cc, hardmax.cc, selection_order.h). TopK ranks every element of a line
// against the others: quadratic in the line's length, meant for short lines (experts, classes).
#include "engine/cpu/op_checks.h"
#include "engine/cuda/ops.h"
#include "engine/cuda/selection.h"

namespace piper::engine::cuda {
namespace {

template <bool kMax>
std::unique_ptr<PreparedKernel> arg_extreme_factory(const KernelArgs& args, CudaContext& context) {
  bool last = false;
  const cpu::AxisLines lines = cpu::check_arg_extreme(args, last);
  return make_kernel([&context, lines, last, int_x = args.input(0).dtype == plan::INT64,
                      px = args.input(0).data,
                      py = args.output(0).as<int64_t>()](const StepContext&) {
    launch_arg_extreme(lines, kMax, last, int_x, px, py, context.stream());
  });
}

std::unique_ptr<PreparedKernel> top_k_factory(const KernelArgs& args, CudaContext& context) {
  const cpu::TopK top = cpu::check_top_k(args);
  const int32_t fault_code =
      context.fault_code([op = args.op(), k = top.k](int64_t k_input, int64_t) {
        return cpu::top_k_error(op, k_input, k);
      });
  return make_kernel([&context, top, fault_code, int_x = args.input(0).dtype == plan::INT64,
                      px = args.input(0).data, pk = args.input(1).as<const int64_t>(),
                      pv = args.output(0).data,
                      pi = args.output(1).as<int64_t>()](const StepContext&) {
    launch_top_k(top.lines, top.k, top.largest, int_x, px, pk, pv, pi, context.device_fault(),
                 fault_code, context.stream());
  });
}

std::unique_ptr<PreparedKernel> one_hot_factory(const KernelArgs& args, CudaContext& context) {
  const cpu::AxisLines lines = cpu::check_one_hot(args);
  return make_kernel([&context, lines, int_y = args.output(0).dtype == plan::INT64,
                      int_indices = args.input(0).dtype == plan::INT64, pi = args.input(0).data,
                      pv = args.input(2).data, py = args.output(0).data](const StepContext&) {
    launch_one_hot(lines, int_y, int_indices, pi, pv, py, context.stream());
  });
}

std::unique_ptr<PreparedKernel> hardmax_factory(const KernelArgs& args, CudaContext& context) {
  const cpu::AxisLines lines = cpu::check_along_axis(args);
  return make_kernel([&context, lines, px = args.input(0).as<const float>(),
                      py = args.output(0).as<float>()](const StepContext&) {
    launch_hardmax(lines, px, py, context.stream());
  });
}

}  // namespace

void register_selection_kernels(CudaKernelTable& table) {
  table["ArgMax"] = arg_extreme_factory<true>;
  table["ArgMin"] = arg_extreme_factory<false>;
  table["Hardmax"] = hardmax_factory;
  table["TopK"] = top_k_factory;
  table["OneHot"] = one_hot_factory;
}

}  // namespace piper::engine::cuda
