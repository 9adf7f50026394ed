// ONNX Einsum on float32. One operand: a strided sum (permutation, diagonal,
// reduction). Two or more: pairwise contractions left to right, each a batched
// GEMM through OpenBLAS. An operand is handed to BLAS in place when its layout
// already is a (possibly transposed) batched matrix; otherwise it is packed
// (gathered, with labels only it carries summed out) into a contiguous buffer
// once per run. Everything is planned in prepare().
#include "formats/einsum.h"

#include <algorithm>
#include <climits>
#include <map>
#include <optional>
#include <set>

#include "engine/cpu/batched_gemm.h"
#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/strided_loop.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

using Labels = std::vector<int>;
using LabelSizes = std::map<int, int64_t>;

// An operand as a function of its distinct labels: element offset = sum of label * stride.
struct View {
  Labels labels;
  std::vector<int64_t> strides;

  int64_t stride(int label) const {
    const auto at = std::find(labels.begin(), labels.end(), label);
    return at == labels.end() ? 0 : strides[at - labels.begin()];
  }
  bool has(int label) const {
    return std::find(labels.begin(), labels.end(), label) != labels.end();
  }
};

// A contiguous tensor whose dimensions carry `labels` in order.
View contiguous_view(const Labels& labels, const LabelSizes& sizes) {
  Shape shape;
  for (int label : labels) shape.push_back(sizes.at(label));
  return {labels, contiguous_strides(shape)};
}

// dst[dst labels] (=|+=) src summed over the labels dst lacks. Labels of dst must be
// labels of src.
struct StridedSum {
  StridedLoop loop;
  int64_t dst_elements = 0;
  bool accumulate = false;

  StridedSum() = default;
  StridedSum(const View& dst, const View& src, const LabelSizes& sizes) {
    Labels order = dst.labels;
    for (int label : src.labels) {
      if (!dst.has(label)) order.push_back(label);  // summed labels innermost
    }
    Shape shape;
    std::vector<int64_t> dst_strides, src_strides;
    dst_elements = 1;
    for (int label : dst.labels) dst_elements *= sizes.at(label);
    for (int label : order) {
      shape.push_back(sizes.at(label));
      dst_strides.push_back(dst.stride(label));
      src_strides.push_back(src.stride(label));
      if (!dst.has(label) && sizes.at(label) != 1) accumulate = true;
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

int64_t extent(const Labels& group, const LabelSizes& sizes) {
  int64_t n = 1;
  for (int label : group) n *= sizes.at(label);
  return n;
}

// The layout that lets BLAS read `view` as [rows, cols] per batch, if any.
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
    Labels batch, m, n, k;
    for (int label : out.labels) {
      const bool in_l = left.has(label), in_r = right.has(label);
      (in_l && in_r ? batch : in_l ? m : n).push_back(label);
    }
    for (int label : left.labels) {
      if (right.has(label) && !out.has(label)) k.push_back(label);
    }
    // The output is written in place when its labels come grouped batch, rows, cols; with
    // the groups the other way round, the operands swap (C^T = B^T A^T).
    const auto grouping = [&](const Labels& rows, const Labels& cols) {
      Labels expected = batch;
      expected.insert(expected.end(), rows.begin(), rows.end());
      expected.insert(expected.end(), cols.begin(), cols.end());
      return expected == out.labels;
    };
    direct_out_ = grouping(m, n);
    if (!direct_out_ && grouping(n, m)) {
      std::swap(left, right);
      std::swap(m, n);
      direct_out_ = true;
      swapped_ = true;
    }
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
        args.fail(std::string(what) + " = " + std::to_string(value) +
                  " exceeds the BLAS integer range; split the einsum into smaller ones");
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

// The labels' sizes from the operands (a size-1 dimension broadcasts against a larger one).
LabelSizes label_sizes(const KernelArgs& args, const formats::EinsumEquation& equation) {
  LabelSizes sizes;
  for (size_t i = 0; i < equation.inputs.size(); ++i) {
    const Shape& shape = args.input(i).shape;
    for (size_t d = 0; d < shape.size(); ++d) {
      const int label = equation.inputs[i][d];
      auto [at, inserted] = sizes.emplace(label, shape[d]);
      if (inserted || at->second == shape[d] || shape[d] == 1) continue;
      if (at->second == 1) {
        at->second = shape[d];
        continue;
      }
      args.fail("operand " + std::to_string(i) + " " + shape_string(shape) + " gives dimension " +
                std::to_string(d) + " size " + std::to_string(shape[d]) +
                " but the same label has size " + std::to_string(at->second) +
                " elsewhere in the equation");
    }
  }
  return sizes;
}

// Operand `labels` (one per dimension) of `shape` as a view: repeated labels (a diagonal) add
// their strides, broadcast dimensions get stride 0.
View operand_view(const Labels& labels, const Shape& shape) {
  const std::vector<int64_t> strides = contiguous_strides(shape);
  View view;
  for (size_t d = 0; d < labels.size(); ++d) {
    const int64_t stride = shape[d] == 1 ? 0 : strides[d];
    const auto at = std::find(view.labels.begin(), view.labels.end(), labels[d]);
    if (at == view.labels.end()) {
      view.labels.push_back(labels[d]);
      view.strides.push_back(stride);
    } else {
      view.strides[at - view.labels.begin()] += stride;
    }
  }
  return view;
}

std::unique_ptr<PreparedKernel> einsum_factory(const KernelArgs& args) {
  if (args.num_inputs() < 1) args.fail("takes at least one input, the plan gives none");
  args.expect_outputs(1, 1);
  const TensorView& y = args.output(0);
  args.expect_dtype(y, plan::FLOAT32, "output 0");
  std::vector<size_t> ranks;
  std::vector<const float*> data;
  for (size_t i = 0; i < args.num_inputs(); ++i) {
    args.expect_dtype(args.input(i), plan::FLOAT32, "input " + std::to_string(i));
    ranks.push_back(static_cast<size_t>(args.input(i).rank()));
    data.push_back(args.input(i).as<const float>());
  }
  if (!args.attributes().has("equation")) args.fail("attribute 'equation' is required");
  formats::EinsumEquation equation;
  try {
    equation = formats::parse_einsum(args.attributes().get_string("equation", ""), ranks);
  } catch (const Error& error) {
    args.fail(error.what());
  }
  const LabelSizes sizes = label_sizes(args, equation);
  Shape expected;
  for (int label : equation.output) expected.push_back(sizes.at(label));
  if (expected != y.shape) {
    args.fail("equation '" + args.attributes().get_string("equation", "") + "' gives shape " +
              shape_string(expected) + " but the output has shape " + shape_string(y.shape));
  }
  std::vector<View> views;
  for (size_t i = 0; i < args.num_inputs(); ++i) {
    views.push_back(operand_view(equation.inputs[i], args.input(i).shape));
  }
  const View out = contiguous_view(equation.output, sizes);
  float* py = y.as<float>();

  if (views.size() == 1) {
    return make_kernel([sum = StridedSum(out, views[0], sizes), px = data[0],
                        py](const StepContext&) { sum.run(px, py); });
  }
  // Left to right: each intermediate keeps the labels that later operands or the output use,
  // grouped batch, rows, cols so that its GEMM writes it in place.
  std::vector<Contraction> steps;
  std::vector<std::vector<float>> intermediates;
  View left = views[0];
  for (size_t i = 1; i < views.size(); ++i) {
    const View& right = views[i];
    if (i + 1 == views.size()) {
      steps.emplace_back(args, left, right, out, sizes);
      break;
    }
    std::set<int> later(equation.output.begin(), equation.output.end());
    for (size_t j = i + 1; j < views.size(); ++j)
      later.insert(views[j].labels.begin(), views[j].labels.end());
    Labels batch, rows, cols;
    for (int label : left.labels) {
      if (!later.count(label)) continue;
      (right.has(label) ? batch : rows).push_back(label);
    }
    for (int label : right.labels) {
      if (later.count(label) && !left.has(label)) cols.push_back(label);
    }
    Labels kept = batch;
    kept.insert(kept.end(), rows.begin(), rows.end());
    kept.insert(kept.end(), cols.begin(), cols.end());
    const View next = contiguous_view(kept, sizes);
    steps.emplace_back(args, left, right, next, sizes);
    intermediates.emplace_back(static_cast<size_t>(extent(kept, sizes)));
    left = next;
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
