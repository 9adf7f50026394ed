// Checks and device geometry of piper.FusedAttention and its gradient on CUDA.
#include "engine/cuda/attention.h"

#include "engine/cuda/gemm.h"
#include "engine/cuda/ops.h"

namespace piper::engine::cuda {

namespace {

// The common_alignment() of the tensors of `args` that have `dtype`: the products' operands.
uint32_t operand_alignment(const KernelArgs& args, plan::DType dtype) {
  uint32_t alignment = 256;
  auto fold = [&](const TensorView& view) {
    if (view.dtype == dtype) alignment = common_alignment({alignment, address(view.data)});
  };
  for (size_t i = 0; i < args.num_inputs(); ++i) {
    if (args.has_input(i)) fold(args.input(i));
  }
  for (size_t i = 0; i < args.num_outputs(); ++i) {
    if (args.has_output(i)) fold(args.output(i));
  }
  return alignment;
}

}  // namespace

Attention attention(const KernelArgs& args, CudaContext& context, size_t first) {
  Attention a;
  cpu::AttentionGeometry& geometry = a;
  geometry = cpu::attention_geometry(float32_labelled(args), first);
  const plan::DType dtype = args.input(first).dtype;
  for (size_t i : {first + 1, first + 2}) {
    args.expect_dtype(
        args.input(i), dtype,
        "input " + std::to_string(i) + " (Q's dtype, input " + std::to_string(first) + ")");
  }
  a.type = blas_type(dtype);
  a.element_bytes = dtype_size(dtype);
  a.tf32 = args.attributes().get_int("tf32", 0) != 0;
  a.alignment = operand_alignment(args, dtype);
  using MaskKind = cpu::AttentionGeometry::MaskKind;
  if (a.mask == MaskKind::kNone) return a;
  a.device_mask.kind =
      a.mask == MaskKind::kFill ? AttentionMask::Kind::kFill : AttentionMask::Kind::kAdd;
  a.device_mask.fill = a.fill;
  a.device_mask.fill_if = a.fill_if;
  a.device_mask.row_stride = a.mask_row_stride;
  a.device_mask.key_stride = a.mask_key_stride;
  a.mask_offsets_on_device = device_array<int64_t>(a.mask_offsets.size() + 1);
  copy_to_device(context, a.mask_offsets_on_device.get(), a.mask_offsets.data(),
                 a.mask_offsets.size() * sizeof(int64_t));
  const TensorView& mask = args.input(first + 3);
  a.device_mask.data = mask.data;
  a.device_mask.bf16 = mask.dtype == plan::BFLOAT16;
  a.device_mask.offsets = a.mask_offsets_on_device.get();
  return a;
}

}  // namespace piper::engine::cuda
