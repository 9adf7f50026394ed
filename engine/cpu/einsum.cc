// ONNX Einsum on float32. One operand: a strided sum (permutation, diagonal,
// reduction). Two or more: pairwise contractions left to right, each a batched
// GEMM (batched_gemm.h). An operand is handed to the GEMM in place when its layout
// already is a (possibly transposed) batched matrix; otherwise it is packed
// (gathered, with labels only it carries summed out) into a contiguous buffer
// once per run. Everything is planned in prepare(), the
// shared part in einsum_plan.h.
#include <algorithm>
#include <climits>
#include <optional>
#include <string>

#include "engine/cpu/batched_gemm.h"
#include "engine/cpu/einsum_plan.h"
#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/strided_loop.h"

namespace piper::engine::cpu {
namespace {

using einsum::contiguous_view;
using einsum::ContractionLabels;
using einsum::extent;
using einsum::Labels;
using einsum::LabelSizes;
using einsum::View;

// dst[dst labels] (=|+=) src summed over the labels dst lacks. Labels of dst must be
// labels of src.
struct StridedSum {
  StridedLoop loop;
  int64_t dst_elements = 0;
  bool accumulate = false;

  StridedSum() = default;
  StridedSum(const View& dst, const View& src, const LabelSizes& sizes) {
    const einsum::SumGeometry g = einsum::sum_geometry(dst, src, sizes);
    Shape shape = g.kept;
    std::vector<int64_t> dst_strides = g.kept_dst, src_strides = g.kept_src;
    dst_elements = num_elements(g.kept);
    for (size_t i = 0; i < g.summed.size(); ++i) {  // summed labels innermost
      shape.push_back(g.summed[i]);
      dst_strides.push_back(0);
      src_strides.push_back(g.summed_src[i]);
      if (g.summed[i] != 1) accumulate = true;
    }
    loop = StridedLoop(shape, {dst_strides, src_strides});
  }

  void run(const float* src, float* dst) const {
    const int64_t sd = loop.inner_stride(0);
    const int64_t ss = loop.inner_stride(1);
    if (!accumulate) {
      loop.parallel_for_each_row([&](const int64_t* offsets, int64_t n) {
        float* out = dst + offsets[0];
        const float* in = src + offsets[1];
        if (sd == 1 && ss == 1) {
          std::copy(in, in + n, out);
        } else {
          for (int64_t i = 0; i < n; ++i) out[i * sd] = in[i * ss];
        }
      });
      return;
    }
    std::fill(dst, dst + dst_elements, 0.0f);
    loop.for_each_row([&](const int64_t* offsets, int64_t n) {
      float* out = dst + offsets[0];
      const float* in = src + offsets[1];
      if (sd == 0) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) sum += in[i * ss];
        out[0] += static_cast<float>(sum);
      } else {
        for (int64_t i = 0; i < n; ++i) out[i * sd] += in[i * ss];
      }
    });
  }
};

// How a view serves as the batched matrix [rows, cols]: rows and cols each merged into one
// stride, one of which is 1.
struct MatrixLayout {
  bool trans = false;
  int ld = 1;
};

// The merged stride of `group` (labels of size 1 skipped), or nullopt when the labels do not
// merge; 0 with extent 1 means "any stride".
std::optional<int64_t> merged_stride(const View& view, const Labels& group,
                                     const LabelSizes& sizes) {
  std::optional<int64_t> stride;
  for (int label : group) {
    const int64_t size = sizes.at(label);
    if (size == 1) continue;
    const int64_t s = view.stride(label);
    if (stride && *stride != s * size) return std::nullopt;
    stride = s;
  }
  return stride.value_or(0);
}

// The layout that lets the GEMM read `view` as [rows, cols] per batch, if any.
std::optional<MatrixLayout> matrix_layout(const View& view, const Labels& batch, const Labels& rows,
                                          const Labels& cols, const LabelSizes& sizes) {
  for (int label : view.labels) {
    const bool known = std::count(batch.begin(), batch.end(), label) +
                           std::count(rows.begin(), rows.end(), label) +
                           std::count(cols.begin(), cols.end(), label) >
                       0;
    if (!known && sizes.at(label) != 1) return std::nullopt;  // must be summed first
  }
  const auto rs = merged_stride(view, rows, sizes);
  const auto cs = merged_stride(view, cols, sizes);
  if (!rs || !cs) return std::nullopt;
  const int64_t r = extent(rows, sizes), c = extent(cols, sizes);
  const auto fits = [](int64_t ld) { return ld <= INT_MAX; };
  if ((c == 1 || *cs == 1) && (r == 1 || *rs >= c)) {
    const int64_t ld = r == 1 ? std::max<int64_t>(c, 1) : *rs;
    if (fits(ld)) return MatrixLayout{false, static_cast<int>(std::max<int64_t>(ld, 1))};
  }
  if ((r == 1 || *rs == 1) && (c == 1 || *cs >= r)) {
    const int64_t ld = c == 1 ? std::max<int64_t>(r, 1) : *cs;
    if (fits(ld)) return MatrixLayout{true, static_cast<int>(std::max<int64_t>(ld, 1))};
  }
  return std::nullopt;
}

// Labels of `view` in `group`, ordered by decreasing stride (the view's physical order).
Labels physical_order(const View& view, const Labels& group) {
  Labels order = group;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return view.stride(a) > view.stride(b); });
  return order;
}

// out[out labels] = sum over the rest of left[...] * right[...], as a batched GEMM.
class Contraction {
 public:
  Contraction(const KernelArgs& args, View left, View right, const View& out,
              const LabelSizes& sizes) {
    const ContractionLabels labels = einsum::contraction_labels(left, right, out);
    const Labels &batch = labels.batch, &m = labels.m, &n = labels.n, &k = labels.k;
    // The output is written in place when its labels come grouped batch, rows, cols; with
    // the groups the other way round, the operands swap (C^T = B^T A^T).
    direct_out_ = labels.grouped;
    swapped_ = labels.swapped;
    if (swapped_) std::swap(left, right);
    // Contracted labels in whichever operand's physical order packs less.
    const Labels k_left = physical_order(left, k), k_right = physical_order(right, k);
    const auto cost = [&](const Labels& order) {
      int64_t packed = 0;
      if (!matrix_layout(left, batch, m, order, sizes)) packed += extent(m, sizes);
      if (!matrix_layout(right, batch, order, n, sizes)) packed += extent(n, sizes);
      return packed;
    };
    const Labels& korder = cost(k_left) <= cost(k_right) ? k_left : k_right;

    const int64_t bsize = extent(batch, sizes), msize = extent(m, sizes), nsize = extent(n, sizes),
                  ksize = extent(korder, sizes);
    for (const auto& [what, value] :
         {std::pair{"M", msize}, std::pair{"N", nsize}, std::pair{"K", ksize}}) {
      if (value > INT_MAX) {
        args.fail(
            std::string(what) + " = " + std::to_string(value) +
            " exceeds the int range of the CPU's products; split the einsum into smaller ones");
      }
    }
    gemm_.m = static_cast<int>(msize);
    gemm_.n = static_cast<int>(nsize);
    gemm_.k = static_cast<int>(ksize);
    empty_ = bsize * msize * nsize == 0;

    const auto prepare_operand = [&](const View& view, const Labels& rows, const Labels& cols,
                                     Operand& operand) {
      Labels packed_labels = batch;
      packed_labels.insert(packed_labels.end(), rows.begin(), rows.end());
      packed_labels.insert(packed_labels.end(), cols.begin(), cols.end());
      if (const auto layout = matrix_layout(view, batch, rows, cols, sizes)) {
        operand.layout = *layout;
        operand.batch_view = view;
        return;
      }
      operand.packed = true;
      const View packed = contiguous_view(packed_labels, sizes);
      operand.pack = StridedSum(packed, view, sizes);
      operand.buffer.resize(static_cast<size_t>(extent(packed_labels, sizes)));
      operand.layout =
          MatrixLayout{false, static_cast<int>(std::max<int64_t>(extent(cols, sizes), 1))};
      operand.batch_view = packed;
    };
    prepare_operand(left, m, korder, left_);
    prepare_operand(right, korder, n, right_);

    View c_view = out;
    gemm_.ldc = std::max(gemm_.n, 1);
    if (direct_out_) {
      const auto layout = matrix_layout(out, batch, m, n, sizes);
      if (layout && !layout->trans) {
        gemm_.ldc = layout->ld;
      } else {
        direct_out_ = false;
      }
    }
    if (!direct_out_) {
      Labels c_labels = batch;
      c_labels.insert(c_labels.end(), m.begin(), m.end());
      c_labels.insert(c_labels.end(), n.begin(), n.end());
      c_view = contiguous_view(c_labels, sizes);
      c_buffer_.resize(static_cast<size_t>(extent(c_labels, sizes)));
      unpack_ = StridedSum(out, c_view, sizes);
      gemm_.ldc = std::max(gemm_.n, 1);
    }

    // Per-batch offsets of both operands and the product.
    Shape batch_shape;
    std::vector<int64_t> sl, sr, sc;
    for (int label : batch) {
      batch_shape.push_back(sizes.at(label));
      sl.push_back(left_.batch_view.stride(label));
      sr.push_back(right_.batch_view.stride(label));
      sc.push_back(c_view.stride(label));
    }
    const StridedLoop loop(batch_shape, {sl, sr, sc});
    loop.for_each_row([&](const int64_t* offsets, int64_t count) {
      for (int64_t i = 0; i < count; ++i) {
        gemm_.a_offsets.push_back(offsets[0] + i * loop.inner_stride(0));
        gemm_.b_offsets.push_back(offsets[1] + i * loop.inner_stride(1));
        gemm_.c_offsets.push_back(offsets[2] + i * loop.inner_stride(2));
      }
    });
    if (batch_shape.empty()) {
      gemm_.a_offsets = {0};
      gemm_.b_offsets = {0};
      gemm_.c_offsets = {0};
    }
    gemm_.trans_a = left_.layout.trans;
    gemm_.trans_b = right_.layout.trans;
    gemm_.lda = left_.layout.ld;
    gemm_.ldb = right_.layout.ld;
    gemm_.prepare();
  }

  // Needs mutable scratch: runs are serialized per kernel.
  void run(const float* left, const float* right, float* out) {
    if (swapped_) std::swap(left, right);
    if (empty_) return;
    float* c = direct_out_ ? out : c_buffer_.data();
    gemm_.run(left_.prepare(left), right_.prepare(right), c, 0.0f);
    if (!direct_out_) unpack_.run(c, out);
  }

 private:
  struct Operand {
    bool packed = false;
    StridedSum pack;
    std::vector<float> buffer;
    MatrixLayout layout;
    View batch_view;  // where the batch strides come from: the operand or its packed copy

    const float* prepare(const float* data) {
      if (!packed) return data;
      pack.run(data, buffer.data());
      return buffer.data();
    }
  };

  Operand left_, right_;
  BatchedGemm gemm_;
  bool empty_ = false, direct_out_ = false, swapped_ = false;
  std::vector<float> c_buffer_;
  StridedSum unpack_;
};

std::unique_ptr<PreparedKernel> einsum_factory(const KernelArgs& args) {
  const einsum::Operands operands = einsum::check_operands(args);
  std::vector<const float*> data;
  for (size_t i = 0; i < args.num_inputs(); ++i) data.push_back(args.input(i).as<const float>());
  float* py = args.output(0).as<float>();

  if (operands.inputs.size() == 1) {
    return make_kernel([sum = StridedSum(operands.output, operands.inputs[0], operands.sizes),
                        px = data[0], py](const StepContext&) { sum.run(px, py); });
  }
  std::vector<Contraction> steps;
  std::vector<std::vector<float>> intermediates;
  for (const einsum::Step& step : einsum::contraction_steps(operands)) {
    steps.emplace_back(args, step.left, step.right, step.out, operands.sizes);
    if (steps.size() < operands.inputs.size() - 1) {
      intermediates.emplace_back(static_cast<size_t>(extent(step.out.labels, operands.sizes)));
    }
  }
  return make_kernel([steps = std::move(steps), intermediates = std::move(intermediates), data,
                      py](const StepContext&) mutable {
    const float* current = data[0];
    for (size_t i = 0; i < steps.size(); ++i) {
      float* target = i + 1 == steps.size() ? py : intermediates[i].data();
      steps[i].run(current, data[i + 1], target);
      current = target;
    }
  });
}

}  // namespace

void register_einsum_kernels(KernelTable& table) { table["Einsum"] = einsum_factory; }

}  // namespace piper::engine::cpu
