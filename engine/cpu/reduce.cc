// Reductions and their adjoints: ONNX ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
// ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and ReduceLogSumExp (reduce_math.h),
// piper.SumTo (sum down to a broadcast shape), piper.BroadcastTo, piper.ReduceMaxGrad and
// piper.ReduceProdGrad.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/op_checks.h"
#include "engine/cpu/parallel.h"
#include "engine/cpu/reduce_math.h"
#include "engine/cpu/split_invariant_sum.h"
#include "engine/cpu/strided_loop.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

// Slabs a reduction is cut into at most; any count gives the same sums (see slab_loops).
constexpr int64_t kReductionSlabs = 16;

// The loop over X (operand 0, contiguous) and its reduced shape `kept` (operand 1: a shape
// that broadcasts to X's, 1 or missing at the reduced axes), cut into slabs along X's
// outermost dimension that is not reduced, so that slabs write disjoint reduced elements; one
// slab when every dimension is reduced. Slabs along the innermost dimension keep at least 64
// elements of each row.
std::vector<StridedLoop> reduction_slabs(const Shape& x, const Shape& kept) {
  const std::vector<std::vector<int64_t>> strides = {contiguous_strides(x),
                                                     broadcast_strides(kept, x)};
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] > 1 && strides[1][d] != 0) {
      const int64_t count =
          d + 1 == x.size() ? std::min(kReductionSlabs, x[d] / 64) : kReductionSlabs;
      return slab_loops(x, strides, d, count);
    }
  }
  return {StridedLoop(x, strides)};
}

// Normalizes ONNX axes (negative count from the end), checking range and duplicates.
std::set<int64_t> normalize_axes(const KernelArgs& args, const std::vector<int64_t>& axes,
                                 int64_t rank) {
  std::set<int64_t> normalized;
  for (int64_t axis : axes) {
    const int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank) {
      args.fail("axis " + std::to_string(axis) + " is out of range for rank " +
                std::to_string(rank));
    }
    if (!normalized.insert(a).second) {
      args.fail("axis " + std::to_string(axis) + " appears twice");
    }
  }
  return normalized;
}

// Runs body(slab) for every slab on parallel.h's threads.
template <typename F>
void for_each_slab(const std::vector<StridedLoop>& slabs, F body) {
  const auto count = static_cast<int64_t>(slabs.size());
  const int64_t per_slab = std::max<int64_t>(slabs.empty() ? 1 : slabs[0].total(), 1);
  parallel_for(count, (kParallelGrain + per_slab - 1) / per_slab, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) body(slabs[static_cast<size_t>(i)]);
  });
}

// X's elements as the rows of a sum (split_invariant_sum.h): a row per index of the reduced
// axes (row-major), each holding the kept elements (the output's, in order). Axes of size 1
// belong to neither, so that a replica's batch of one sums as a larger batch's halves do.
struct SumRows {
  enum class Layout {
    kColumns,   // the reduced axes before the kept ones: row r at r · columns (bias gradients)
    kGroups,    // the kept axes before the reduced ones: output o's group at o · rows
    kGathered,  // interleaved: row r's element c at row_offsets[r] + column_offsets[c]
  };
  Layout layout = Layout::kColumns;
  int64_t rows = 1, columns = 1;
  std::vector<int64_t> row_offsets, column_offsets;
};

// The element offsets of every index of `dims` (sizes, with x's strides) in row-major order.
std::vector<int64_t> odometer_offsets(const std::vector<std::pair<int64_t, int64_t>>& dims) {
  std::vector<int64_t> offsets = {0};
  for (const auto& [size, stride] : dims) {
    std::vector<int64_t> next;
    next.reserve(offsets.size() * static_cast<size_t>(size));
    for (int64_t base : offsets) {
      for (int64_t i = 0; i < size; ++i) next.push_back(base + i * stride);
    }
    offsets = std::move(next);
  }
  return offsets;
}

SumRows sum_rows(const Shape& x, const Shape& kept) {
  const size_t lead = x.size() - kept.size();
  const std::vector<int64_t> strides = contiguous_strides(x);
  std::vector<std::pair<int64_t, int64_t>> reduced, kept_dims;
  bool kept_seen = false, reduced_after_kept = false, kept_after_reduced = false;
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] == 1) continue;
    const bool is_kept = d >= lead && kept[d - lead] != 1;
    if (is_kept) {
      kept_after_reduced = kept_after_reduced || !reduced.empty();
      kept_dims.emplace_back(x[d], strides[d]);
      kept_seen = true;
    } else {
      reduced_after_kept = reduced_after_kept || kept_seen;
      reduced.emplace_back(x[d], strides[d]);
    }
  }
  SumRows rows;
  for (const auto& dim : reduced) rows.rows *= dim.first;
  for (const auto& dim : kept_dims) rows.columns *= dim.first;
  if (!reduced_after_kept) {
    rows.layout = SumRows::Layout::kColumns;
  } else if (!kept_after_reduced) {
    rows.layout = SumRows::Layout::kGroups;
  } else {
    rows.layout = SumRows::Layout::kGathered;
    rows.row_offsets = odometer_offsets(reduced);
    rows.column_offsets = odometer_offsets(kept_dims);
  }
  return rows;
}

// sums = the sums of map(x) over the rows of `g`, in the split-invariant order, each output's
// sum the same whatever the thread count.
template <ReduceMap kMap>
void split_invariant_reduction(const SumRows& g, const float* px, float* sums) {
  const auto term = [](float v) { return reduce_map<float>(kMap, v, 0.0f); };
  switch (g.layout) {
    case SumRows::Layout::kColumns:
      parallel_split_invariant_sums(g.rows, g.columns, sums,
                                    [&](int64_t r, int64_t first, int64_t last, float* acc) {
                                      const float* in = px + r * g.columns;
                                      for (int64_t c = first; c < last; ++c)
                                        acc[c - first] += term(in[c]);
                                    });
      return;
    case SumRows::Layout::kGroups:
      parallel_for(g.columns, (kParallelGrain + g.rows - 1) / std::max<int64_t>(g.rows, 1),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t o = begin; o < end; ++o) {
                       const float* in = px + o * g.rows;
                       split_invariant_sums(g.rows, 1, sums + o,
                                            [&](int64_t r, float* acc) { acc[0] += term(in[r]); });
                     }
                   });
      return;
    case SumRows::Layout::kGathered:
      parallel_split_invariant_sums(
          g.rows, g.columns, sums, [&](int64_t r, int64_t first, int64_t last, float* acc) {
            const float* in = px + g.row_offsets[static_cast<size_t>(r)];
            for (int64_t c = first; c < last; ++c)
              acc[c - first] += term(in[g.column_offsets[static_cast<size_t>(c)]]);
          });
      return;
  }
}

// acc[o] = fold over o's group of map(x) (acc holding the fold's identity), slab by slab, in
// Acc (double for float32 x, int64_t for int64); the shift of output o is shift[o]
// (kExpShifted only).
template <ReduceFold kFold, ReduceMap kMap, typename T, typename Acc>
void fold_slabs(const std::vector<StridedLoop>& slabs, const T* px, Acc* acc, const Acc* shift) {
  for_each_slab(slabs, [&](const StridedLoop& loop) {
    const int64_t s = loop.inner_stride(1);
    loop.for_each_row([&](const int64_t* offsets, int64_t n) {
      const T* in = px + offsets[0];
      Acc* out = acc + offsets[1];
      const Acc* m = kMap == ReduceMap::kExpShifted ? shift + offsets[1] : nullptr;
      if (s == 0) {
        const Acc mi = m ? m[0] : Acc(0);
        Acc folded = out[0];
        for (int64_t i = 0; i < n; ++i)
          folded = reduce_combine(kFold, folded, reduce_map<Acc>(kMap, in[i], mi));
        out[0] = folded;
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const Acc v = reduce_map<Acc>(kMap, in[i], m ? m[i * s] : Acc(0));
          out[i * s] = reduce_combine(kFold, out[i * s], v);
        }
      }
    });
  });
}

// fold_slabs for a reduction known at run time only.
template <typename T, typename Acc>
void fold_slabs(const ReduceFormula& r, const std::vector<StridedLoop>& slabs, const T* px,
                Acc* acc, const Acc* shift) {
  using Fold = ReduceFold;
  using Map = ReduceMap;
  switch (r.fold) {
    case Fold::kSum:
      switch (r.map) {
        case Map::kAbs:
          return fold_slabs<Fold::kSum, Map::kAbs>(slabs, px, acc, shift);
        case Map::kSquare:
          return fold_slabs<Fold::kSum, Map::kSquare>(slabs, px, acc, shift);
        case Map::kExpShifted:
          return fold_slabs<Fold::kSum, Map::kExpShifted>(slabs, px, acc, shift);
        case Map::kIsZero:
          return fold_slabs<Fold::kSum, Map::kIsZero>(slabs, px, acc, shift);
        default:
          return fold_slabs<Fold::kSum, Map::kIdentity>(slabs, px, acc, shift);
      }
    case Fold::kProd:
      if (r.map == Map::kNonzero)
        return fold_slabs<Fold::kProd, Map::kNonzero>(slabs, px, acc, shift);
      return fold_slabs<Fold::kProd, Map::kIdentity>(slabs, px, acc, shift);
    case Fold::kMax:
      return fold_slabs<Fold::kMax, Map::kIdentity>(slabs, px, acc, shift);
    case Fold::kMin:
      return fold_slabs<Fold::kMin, Map::kIdentity>(slabs, px, acc, shift);
  }
}

// acc = the fold of `r` over each group (unfinished).
template <typename T, typename Acc>
void fold_groups(const ReduceFormula& r, const std::vector<StridedLoop>& slabs, const T* px,
                 std::vector<Acc>& acc, const Acc* shift) {
  const Acc identity = reduce_identity<Acc>(r.fold);
  parallel_for(static_cast<int64_t>(acc.size()), kParallelGrain, [&](int64_t begin, int64_t end) {
    std::fill(acc.begin() + begin, acc.begin() + end, identity);
  });
  fold_slabs(r, slabs, px, acc.data(), shift);
}

// y = the reduction `r` (takes_int64) of the int64 x over the groups `kept` gives, in int64.
std::unique_ptr<PreparedKernel> make_int64_reduction(const TensorView& x, const Shape& kept,
                                                     const TensorView& y, ReduceFormula r) {
  return make_kernel([slabs = reduction_slabs(x.shape, kept), r, px = x.as<const int64_t>(),
                      acc = std::vector<int64_t>(static_cast<size_t>(num_elements(kept))),
                      py = y.as<int64_t>()](const StepContext&) mutable {
    fold_groups(r, slabs, px, acc, static_cast<const int64_t*>(nullptr));
    std::copy(acc.begin(), acc.end(), py);
  });
}

// y = the reduction `r` of x over the dimensions where `kept` is 1 and x's is not, with `kept`
// (x's shape with 1 at reduced axes) broadcasting to x's shape; `count` elements fold into
// each output. Sums (of x, |x| or x²) add float32 in the split-invariant order
// (split_invariant_sum.h), so that data parallelism's halves of the batch rows, added by the
// all-reduce, give one process's sums; the other folds run in double (see reduce_math.h).
std::unique_ptr<PreparedKernel> make_reduction(const TensorView& x, const Shape& kept,
                                               const TensorView& y, ReduceFormula r,
                                               int64_t count) {
  const double scale = r.mean ? 1.0 / static_cast<double>(count) : 1.0;
  const bool split_invariant =
      r.fold == ReduceFold::kSum &&
      (r.map == ReduceMap::kIdentity || r.map == ReduceMap::kSquare || r.map == ReduceMap::kAbs);
  if (split_invariant) {
    return make_kernel([g = sum_rows(x.shape, kept), r, scale, px = x.as<const float>(),
                        py = y.as<float>(), m = y.elements()](const StepContext&) {
      switch (r.map) {
        case ReduceMap::kAbs:
          split_invariant_reduction<ReduceMap::kAbs>(g, px, py);
          break;
        case ReduceMap::kSquare:
          split_invariant_reduction<ReduceMap::kSquare>(g, px, py);
          break;
        default:
          split_invariant_reduction<ReduceMap::kIdentity>(g, px, py);
          break;
      }
      if (r.finish == ReduceFinish::kScale && scale == 1.0) return;
      parallel_for(m, kParallelGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          py[i] = static_cast<float>(reduce_finish(r.finish, py[i], scale, 0.0));
      });
    });
  }
  const bool shifted = r.map == ReduceMap::kExpShifted;
  std::vector<double> acc(static_cast<size_t>(num_elements(kept)));
  std::vector<double> shift(shifted ? acc.size() : 0);
  return make_kernel([slabs = reduction_slabs(x.shape, kept), r, scale, shifted, acc, shift,
                      px = x.as<const float>(), py = y.as<float>()](const StepContext&) mutable {
    const auto m = static_cast<int64_t>(acc.size());
    if (shifted) {
      fold_groups(kShiftFormula, slabs, px, shift, static_cast<const double*>(nullptr));
      for (double& v : shift) v = reduce_shift(v);
    }
    fold_groups(r, slabs, px, acc, static_cast<const double*>(shift.data()));
    parallel_for(m, kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const double v = shifted ? shift[static_cast<size_t>(i)] : 0.0;
        py[i] = static_cast<float>(reduce_finish(r.finish, acc[static_cast<size_t>(i)], scale, v));
      }
    });
  });
}

// The optional axes input (a plan constant, already written when kernels are prepared).
std::vector<int64_t> axes_input(const KernelArgs& args) {
  if (!args.has_input(1)) {
    return {};
  }
  const TensorView& t = args.input(1);
  args.expect_dtype(t, plan::INT64, "axes (input 1)");
  if (t.rank() != 1) {
    args.fail("axes (input 1) must be 1-D, got shape " + shape_string(t.shape));
  }
  return {t.as<const int64_t>(), t.as<const int64_t>() + t.elements()};
}

// ONNX's Reduce* ops (reduce_math.h), float32 or int64: axes from the optional input (opset 18, and
// ReduceSum's since 13) or else the attribute (opset 13 to 17); keepdims;
// noop_with_empty_axes reduces each element alone (ReduceSumSquare squares it, as ONNX's
// reference does).
KernelFactory reduce_factory(ReduceFormula r) {
  return [r](const KernelArgs& args) -> std::unique_ptr<PreparedKernel> {
    args.expect_inputs(1, 2);
    args.expect_outputs(1, 1);
    const TensorView& x = args.input(0);
    const TensorView& y = args.output(0);
    const auto axes = args.has_input(1) ? axes_input(args) : args.attributes().get_ints("axes", {});
    int64_t count = 1;
    const Shape kept = check_reduction(args, axes, &count);
    if (check_reduction_dtypes(args, r) == plan::INT64) return make_int64_reduction(x, kept, y, r);
    return make_reduction(x, kept, y, r, count);
  };
}

// piper.SumTo: X summed over its broadcast dimensions down to Y's shape.
std::unique_ptr<PreparedKernel> sum_to_factory(const KernelArgs& args) {
  check_float_unary(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  if (!broadcasts_to(y.shape, x.shape)) {
    args.fail("output shape " + shape_string(y.shape) + " does not broadcast to the input shape " +
              shape_string(x.shape) + ", so X cannot be summed down to it");
  }
  return make_reduction(x, y.shape, y, ReduceFormula{}, 1);
}

// piper.BroadcastTo: X with size-1 dimensions inserted at `axes` (Y's numbering), broadcast to
// Y's shape, times `scale`.
std::unique_ptr<PreparedKernel> broadcast_to_factory(const KernelArgs& args) {
  const Shape expanded = check_broadcast_to(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  const float scale = static_cast<float>(args.attributes().get_float("scale", 1.0));
  const StridedLoop loop(y.shape,
                         {contiguous_strides(y.shape), broadcast_strides(expanded, y.shape)});
  return make_kernel(
      [loop, scale, px = x.as<const float>(), py = y.as<float>()](const StepContext&) {
        const int64_t s = loop.inner_stride(1);
        loop.parallel_for_each_row([&](const int64_t* offsets, int64_t n) {
          float* out = py + offsets[0];
          const float* in = px + offsets[1];
          for (int64_t i = 0; i < n; ++i) out[i] = scale * in[i * s];
        });
      });
}

// piper.ReduceMaxGrad(dY, X, Y), attribute `axes` (the reduced axes of X; none when empty):
// dX = dY · [X = Y] / (the number of elements equal to Y in the reduced group), with dY and Y
// broadcast back over the reduced axes.
std::unique_ptr<PreparedKernel> reduce_max_grad_factory(const KernelArgs& args) {
  const Shape kept = check_reduce_max_grad(args);
  const TensorView& dy = args.input(0);
  const TensorView& x = args.input(1);
  const TensorView& y = args.input(2);
  const TensorView& dx = args.output(0);
  std::vector<float> ties(static_cast<size_t>(num_elements(kept)));
  return make_kernel([slabs = reduction_slabs(x.shape, kept), ties, pdy = dy.as<const float>(),
                      px = x.as<const float>(), py = y.as<const float>(),
                      pdx = dx.as<float>()](const StepContext&) mutable {
    std::fill(ties.begin(), ties.end(), 0.0f);
    for_each_slab(slabs, [&](const StridedLoop& loop) {
      const int64_t s = loop.inner_stride(1);
      loop.for_each_row([&](const int64_t* offsets, int64_t n) {
        const float* in = px + offsets[0];
        const float* best = py + offsets[1];
        float* count = ties.data() + offsets[1];
        for (int64_t i = 0; i < n; ++i) count[i * s] += in[i] == best[i * s] ? 1.0f : 0.0f;
      });
      loop.for_each_row([&](const int64_t* offsets, int64_t n) {
        const float* in = px + offsets[0];
        float* out = pdx + offsets[0];
        const float* best = py + offsets[1];
        const float* g = pdy + offsets[1];
        const float* count = ties.data() + offsets[1];
        for (int64_t i = 0; i < n; ++i) {
          out[i] = in[i] == best[i * s] ? g[i * s] / count[i * s] : 0.0f;
        }
      });
    });
  });
}

// piper.ReduceProdGrad(dY, X), attribute `axes`: dX = dY · the product of the other elements
// of X's group (reduce_math.h), from each group's zero count and product of nonzeros, which are
// rounded to float as the CUDA kernel keeps them.
std::unique_ptr<PreparedKernel> reduce_prod_grad_factory(const KernelArgs& args) {
  const Shape kept = check_reduce_prod_grad(args);
  const TensorView& dy = args.input(0);
  const TensorView& x = args.input(1);
  const TensorView& dx = args.output(0);
  std::vector<double> acc(static_cast<size_t>(num_elements(kept)));
  return make_kernel([slabs = reduction_slabs(x.shape, kept), acc,
                      zeros = std::vector<float>(acc.size()),
                      product = std::vector<float>(acc.size()), pdy = dy.as<const float>(),
                      px = x.as<const float>(), pdx = dx.as<float>()](const StepContext&) mutable {
    fold_groups(kZeroCount, slabs, px, acc, static_cast<const double*>(nullptr));
    std::transform(acc.begin(), acc.end(), zeros.begin(),
                   [](double v) { return static_cast<float>(v); });
    fold_groups(kNonzeroProduct, slabs, px, acc, static_cast<const double*>(nullptr));
    std::transform(acc.begin(), acc.end(), product.begin(),
                   [](double v) { return static_cast<float>(v); });
    for_each_slab(slabs, [&](const StridedLoop& loop) {
      const int64_t s = loop.inner_stride(1);
      loop.for_each_row([&](const int64_t* offsets, int64_t n) {
        const int64_t k = offsets[1];
        for (int64_t i = 0; i < n; ++i) {
          const size_t g = static_cast<size_t>(k + i * s);
          pdx[offsets[0] + i] = reduce_prod_grad(pdy[g], px[offsets[0] + i], zeros[g], product[g]);
        }
      });
    });
  });
}

}  // namespace

Shape check_broadcast_to(const KernelArgs& args) {
  check_float_unary(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  const auto axes = args.attributes().get_ints("axes", {});
  const int64_t rank = x.rank() + static_cast<int64_t>(axes.size());
  if (rank > y.rank()) {
    args.fail("X " + shape_string(x.shape) + " with " + std::to_string(axes.size()) +
              " inserted axes has more dimensions than Y " + shape_string(y.shape));
  }
  const std::set<int64_t> inserted = normalize_axes(args, axes, y.rank());
  Shape expanded;
  size_t next = 0;
  for (int64_t a = 0; a < rank; ++a) {
    if (inserted.count(a + (y.rank() - rank))) {
      expanded.push_back(1);
    } else if (next < x.shape.size()) {
      expanded.push_back(x.shape[next++]);
    } else {
      args.fail("axes do not fit X " + shape_string(x.shape) + " into Y " + shape_string(y.shape));
    }
  }
  if (next != x.shape.size() || !broadcasts_to(expanded, y.shape)) {
    args.fail("X " + shape_string(x.shape) + " with size-1 axes inserted (" +
              shape_string(expanded) + ") does not broadcast to Y " + shape_string(y.shape));
  }
  return expanded;
}

Shape check_reduction(const KernelArgs& args, const std::vector<int64_t>& axes, int64_t* count) {
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  *count = 1;
  if (axes.empty() && args.attributes().get_int("noop_with_empty_axes", 0) != 0) {
    args.expect_same_shape(x, "input 0", y, "output 0 (noop_with_empty_axes)");
    return x.shape;
  }
  std::set<int64_t> reduced = normalize_axes(args, axes, x.rank());
  if (axes.empty()) {
    for (int64_t a = 0; a < x.rank(); ++a) reduced.insert(a);
  }
  const bool keepdims = args.attributes().get_int("keepdims", 1) != 0;
  Shape kept = x.shape;
  Shape expected;
  for (int64_t a = 0; a < x.rank(); ++a) {
    if (reduced.count(a)) {
      *count *= x.shape[a];
      kept[a] = 1;
      if (keepdims) expected.push_back(1);
    } else {
      expected.push_back(x.shape[a]);
    }
  }
  if (expected != y.shape) {
    args.fail("reducing " + shape_string(x.shape) + " with keepdims=" + std::to_string(keepdims) +
              " gives " + shape_string(expected) + " but the output has shape " +
              shape_string(y.shape));
  }
  return kept;
}

namespace {

// The gradient of a reduction of X over attribute `axes`, from dY (input 0), X (input 1) and,
// with `reads_y`, Y (input 2): returns X's shape with 1 at the reduced axes.
Shape check_reduce_grad(const KernelArgs& args, bool reads_y) {
  const size_t inputs = reads_y ? 3 : 2;
  args.expect_inputs(inputs, inputs);
  args.expect_outputs(1, 1);
  const TensorView& dy = args.input(0);
  const TensorView& x = args.input(1);
  const TensorView& dx = args.output(0);
  args.expect_dtype(dy, plan::FLOAT32, "dY (input 0)");
  args.expect_dtype(x, plan::FLOAT32, "X (input 1)");
  args.expect_dtype(dx, plan::FLOAT32, "dX (output 0)");
  args.expect_same_shape(x, "X (input 1)", dx, "dX (output 0)");
  Shape kept = x.shape;
  for (int64_t a : normalize_axes(args, args.attributes().get_ints("axes", {}), x.rank())) {
    kept[a] = 1;
  }
  if (dy.elements() != num_elements(kept)) {
    args.fail("dY " + shape_string(dy.shape) + " must hold one element per reduced group of X " +
              shape_string(x.shape) + " (" + shape_string(kept) + ")");
  }
  if (reads_y) {
    const TensorView& y = args.input(2);
    args.expect_dtype(y, plan::FLOAT32, "Y (input 2)");
    if (y.elements() != num_elements(kept)) {
      args.fail("Y " + shape_string(y.shape) + " must hold one element per reduced group of X " +
                shape_string(x.shape) + " (" + shape_string(kept) + ")");
    }
  }
  return kept;
}

}  // namespace

plan::DType check_reduction_dtypes(const KernelArgs& args, const ReduceFormula& r) {
  const TensorView& x = args.input(0);
  args.expect_dtype(args.output(0), x.dtype, "output 0 (input 0's dtype)");
  if (x.dtype == plan::INT64 && takes_int64(r)) return plan::INT64;
  args.expect_dtype(x, plan::FLOAT32,
                    takes_int64(r) ? "input 0 (float32 or int64)" : "input 0 (float32 only)");
  return plan::FLOAT32;
}

Shape check_reduce_max_grad(const KernelArgs& args) { return check_reduce_grad(args, true); }

Shape check_reduce_prod_grad(const KernelArgs& args) { return check_reduce_grad(args, false); }

void register_reduce_kernels(KernelTable& table) {
  for (const NamedFormula& named : kReduceFormulas)
    table[named.op] = reduce_factory(named.reduction);
  table["piper.SumTo"] = sum_to_factory;
  table["piper.BroadcastTo"] = broadcast_to_factory;
  table["piper.ReduceMaxGrad"] = reduce_max_grad_factory;
  table["piper.ReduceProdGrad"] = reduce_prod_grad_factory;
}

}  // namespace piper::engine::cpu
