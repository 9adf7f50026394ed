// ONNX Einsum on CUDA, float32 (bfloat16 tensors arrive widened), planned as the CPU kernel
// plans it (engine/cpu/einsum_plan.h). One operand: a strided sum (permutation, diagonal,
// reduction). Two or more: pairwise contractions left to right, each one strided batched
// product (engine/cuda/gemm.h) of operands packed, with the labels only they carry summed
// out, into contiguous [batch, m, k] and [batch, k, n] device buffers; its [batch, m, n]
// result is written in place when the output's labels come in that order, else permuted
// into it. Sums and packing run on the reduction kernel (reduce.h), in double precision.
#include "engine/cpu/einsum_plan.h"
#include "engine/cuda/check.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/ops.h"
#include "engine/cuda/reduce.h"

namespace piper::engine::cuda {
namespace {

namespace einsum = cpu::einsum;

// dst[dst labels] = src summed over the labels dst lacks; dst contiguous in its labels' order.
class DeviceSum {
 public:
  DeviceSum() = default;
  DeviceSum(const einsum::View& dst, const einsum::View& src, const einsum::LabelSizes& sizes) {
    const einsum::SumGeometry g = einsum::sum_geometry(dst, src, sizes);
    plan_.outputs = strided_index(g.kept, {g.kept_src});
    plan_.group = strided_index(g.summed, {g.summed_src});
    plan_.chunks = reduce_chunks(plan_.outputs.total, plan_.group.total);
    partials_ = device_array<double>(
        plan_.chunks > 1 ? static_cast<size_t>(plan_.chunks * plan_.outputs.total) : 0);
  }

  void run(const float* src, float* dst, cudaStream_t stream) const {
    launch_reduce(plan_, FloatView{const_cast<float*>(src), false}, FloatView{dst, false},
                  partials_.get(), stream);
  }

 private:
  ReducePlan plan_;
  std::shared_ptr<double> partials_;
};

// out[out labels] = sum over the rest of left[...] * right[...] (out contiguous, at `out_data`).
class DeviceContraction {
 public:
  DeviceContraction(CudaContext& context, const KernelArgs& args, einsum::View left,
                    einsum::View right, const einsum::View& out, const einsum::LabelSizes& sizes,
                    float* out_data) {
    const einsum::ContractionLabels labels = einsum::contraction_labels(left, right, out);
    swapped_ = labels.swapped;
    if (swapped_) std::swap(left, right);
    const auto concat = [&](const einsum::Labels& rows, const einsum::Labels& cols) {
      einsum::Labels all = labels.batch;
      all.insert(all.end(), rows.begin(), rows.end());
      all.insert(all.end(), cols.begin(), cols.end());
      return all;
    };
    const int64_t b = einsum::extent(labels.batch, sizes), m = einsum::extent(labels.m, sizes),
                  n = einsum::extent(labels.n, sizes), k = einsum::extent(labels.k, sizes);
    out_elements_ = b * m * n;
    if (out_elements_ == 0 || k == 0) return;  // nothing, or zeros
    a_ = device_array<float>(static_cast<size_t>(b * m * k));
    b_ = device_array<float>(static_cast<size_t>(b * k * n));
    pack_a_ = DeviceSum(einsum::contiguous_view(concat(labels.m, labels.k), sizes), left, sizes);
    pack_b_ = DeviceSum(einsum::contiguous_view(concat(labels.k, labels.n), sizes), right, sizes);
    // The product is [batch, m, n] contiguous: the output itself when its labels come so.
    float* c = out_data;
    if (!labels.grouped) {
      c_ = device_array<float>(static_cast<size_t>(out_elements_));
      c = c_.get();
      unpack_ = DeviceSum(out, einsum::contiguous_view(concat(labels.m, labels.n), sizes), sizes);
    }
    ProductShape shape{.m = m,
                       .n = n,
                       .k = k,
                       .lda = k,
                       .ldb = n,
                       .ldc = n,
                       .batches = b,
                       .stride_a = m * k,
                       .stride_b = k * n,
                       .stride_c = m * n,
                       .tf32 = args.attributes().get_int("tf32", 0) != 0};
    const auto bytes = [](int64_t elements) { return static_cast<uint64_t>(elements) * 4; };
    shape.alignment =
        common_alignment({address(a_.get()), address(b_.get()), address(c), bytes(shape.stride_a),
                          bytes(shape.stride_b), bytes(shape.stride_c)});
    product_ = std::make_shared<StridedProduct>(context, shape, args.op());
  }

  void run(const float* left, const float* right, float* out, cudaStream_t stream) const {
    if (out_elements_ == 0) return;
    if (!product_) {  // nothing contracted: zeros
      PIPER_CUDA_CHECK(
          cudaMemsetAsync(out, 0, static_cast<size_t>(out_elements_) * sizeof(float), stream));
      return;
    }
    if (swapped_) std::swap(left, right);
    pack_a_.run(left, a_.get(), stream);
    pack_b_.run(right, b_.get(), stream);
    float* c = c_ ? c_.get() : out;
    product_->run(a_.get(), b_.get(), c, 1.0f, 0.0f);
    if (c_) unpack_.run(c, out, stream);
  }

 private:
  bool swapped_ = false;
  int64_t out_elements_ = 0;
  std::shared_ptr<float> a_, b_, c_;  // packed operands; the product when not written in place
  DeviceSum pack_a_, pack_b_, unpack_;
  std::shared_ptr<StridedProduct> product_;  // null when K is 0
};

std::unique_ptr<PreparedKernel> einsum_factory(const KernelArgs& args, CudaContext& context) {
  const einsum::Operands operands = einsum::check_operands(args);
  std::vector<const float*> data;
  for (size_t i = 0; i < args.num_inputs(); ++i) data.push_back(args.input(i).as<const float>());
  float* py = args.output(0).as<float>();

  if (operands.inputs.size() == 1) {
    return make_kernel(
        [&context, sum = DeviceSum(operands.output, operands.inputs[0], operands.sizes),
         px = data[0], py](const StepContext&) { sum.run(px, py, context.stream()); });
  }
  std::vector<DeviceContraction> steps;
  std::vector<std::shared_ptr<float>> intermediates;
  for (const einsum::Step& step : einsum::contraction_steps(operands)) {
    float* target = py;
    if (steps.size() + 2 < operands.inputs.size()) {
      intermediates.push_back(device_array<float>(
          static_cast<size_t>(einsum::extent(step.out.labels, operands.sizes))));
      target = intermediates.back().get();
    }
    steps.emplace_back(context, args, step.left, step.right, step.out, operands.sizes, target);
  }
  return make_kernel([&context, steps = std::move(steps), intermediates = std::move(intermediates),
                      data, py](const StepContext&) {
    const cudaStream_t stream = context.stream();
    const float* current = data[0];
    for (size_t i = 0; i < steps.size(); ++i) {
      float* target = i + 1 == steps.size() ? py : intermediates[i].get();
      steps[i].run(current, data[i + 1], target, stream);
      current = target;
    }
  });
}

}  // namespace

void register_einsum_kernels(CudaKernelTable& table) { table["Einsum"] = einsum_factory; }

}  // namespace piper::engine::cuda
