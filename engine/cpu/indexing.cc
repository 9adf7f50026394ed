// Kernels that select elements by index: ONNX Gather, GatherElements, ScatterElements,
// OneHot, TopK, ArgMax, ArgMin, and the adjoints of the gathers, piper.GatherGrad and
// piper.GatherElementsGrad (scatter-add into zeros). Indices are int64; a
// negative index counts from the end of its axis; an index out of range fails
// at run time naming the op and the index.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "engine/cpu/checked_index.h"
#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/op_checks.h"
#include "engine/cpu/parallel.h"
#include "engine/cpu/scatter_reduction.h"
#include "engine/cpu/selection_order.h"
#include "engine/cpu/strided_loop.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

// check_gather()'s geometry with what the kernel reads at run time.
struct GatherGeometry : GatherAxis {
  std::string op;
  const int64_t* indices = nullptr;
};

GatherGeometry gather_geometry(const KernelArgs& args, bool grad) {
  GatherGeometry g;
  static_cast<GatherAxis&>(g) = check_gather(args, grad);
  g.op = args.op();
  g.indices = args.input(1).as<const int64_t>();
  return g;
}

std::unique_ptr<PreparedKernel> gather_factory(const KernelArgs& args) {
  const GatherGeometry g = gather_geometry(args, false);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  const size_t row = static_cast<size_t>(g.inner) * dtype_size(y.dtype);
  return make_kernel([g, row, px = x.as<const uint8_t>(),
                      py = y.as<uint8_t>()](const StepContext&) {
    parallel_for(g.outer * g.count, (kParallelGrain + g.inner - 1) / std::max<int64_t>(g.inner, 1),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t r = begin; r < end; ++r) {
                     const int64_t o = r / g.count, j = r % g.count;
                     const int64_t i = checked_index(g.op, g.indices[j], g.axis_size, j);
                     std::memcpy(py + static_cast<size_t>(r) * row,
                                 px + static_cast<size_t>(o * g.axis_size + i) * row, row);
                   }
                 });
  });
}

// The sum of rows `rows` of dY (positions within [lo, lo + len), increasing) in the
// split-invariant order of the positions [lo, lo + len) (split_invariant_sum.h), where the
// positions not listed add nothing: a half without listed positions is skipped, as adding its
// zero sum would change no bits (bar a zero's sign). `out` and `scratch` hold `inner` floats per
// level of halving.
void split_invariant_row_sum(const float* dy, int64_t inner, const int64_t* rows, int64_t count,
                             int64_t lo, int64_t len, float* out, float* scratch) {
  if (len % 2 != 0) {
    std::fill(out, out + inner, 0.0f);
    for (int64_t i = 0; i < count; ++i) {
      const float* in = dy + rows[i] * inner;
      for (int64_t k = 0; k < inner; ++k) out[k] += in[k];
    }
    return;
  }
  const int64_t half = len / 2;
  const int64_t left = std::lower_bound(rows, rows + count, lo + half) - rows;
  if (left == count || left == 0) {
    const int64_t from = left == count ? lo : lo + half;
    split_invariant_row_sum(dy, inner, rows, count, from, half, out, scratch);
    return;
  }
  split_invariant_row_sum(dy, inner, rows, left, lo, half, out, scratch);
  split_invariant_row_sum(dy, inner, rows + left, count - left, lo + half, half, scratch,
                          scratch + inner);
  for (int64_t k = 0; k < inner; ++k) out[k] += scratch[k];
}

// piper.GatherGrad: dX = zeros of X's shape with every row of dY added at its index. Each
// index's rows are summed in the split-invariant order of the positions (split_invariant_sum.h),
// so that replicas' halves of the positions added by the all-reduce give one process's sums.
std::unique_ptr<PreparedKernel> gather_grad_factory(const KernelArgs& args) {
  const GatherGeometry g = gather_geometry(args, true);
  const TensorView& dy = args.input(0);
  const TensorView& dx = args.output(0);
  return make_kernel([g, pdy = dy.as<const float>(), pdx = dx.as<float>(),
                      total = dx.elements()](const StepContext&) {
    parallel_for(total, kParallelGrain,
                 [&](int64_t begin, int64_t end) { std::fill(pdx + begin, pdx + end, 0.0f); });
    // The positions of each index in increasing order (a counting sort): index i's are
    // positions[starts[i], starts[i + 1]).
    std::vector<int64_t> starts(static_cast<size_t>(g.axis_size + 1));
    std::vector<int64_t> positions(static_cast<size_t>(g.count));
    for (int64_t j = 0; j < g.count; ++j)
      ++starts[static_cast<size_t>(checked_index(g.op, g.indices[j], g.axis_size, j)) + 1];
    for (int64_t i = 0; i < g.axis_size; ++i)
      starts[static_cast<size_t>(i + 1)] += starts[static_cast<size_t>(i)];
    std::vector<int64_t> next(starts.begin(), starts.end() - 1);
    for (int64_t j = 0; j < g.count; ++j) {
      const int64_t i = checked_index(g.op, g.indices[j], g.axis_size, j);
      positions[static_cast<size_t>(next[static_cast<size_t>(i)]++)] = j;
    }
    const int64_t levels = 2 + static_cast<int64_t>(std::log2(std::max<int64_t>(g.count, 1)));
    const int64_t grain = (kParallelGrain + g.inner - 1) / std::max<int64_t>(g.inner, 1);
    for (int64_t o = 0; o < g.outer; ++o) {
      const float* rows = pdy + o * g.count * g.inner;
      float* block = pdx + o * g.axis_size * g.inner;
      parallel_for(g.axis_size, grain, [&](int64_t first, int64_t last) {
        std::vector<float> scratch(static_cast<size_t>(levels * g.inner));
        for (int64_t i = first; i < last; ++i) {
          const int64_t begin = starts[static_cast<size_t>(i)],
                        end = starts[static_cast<size_t>(i + 1)];
          if (begin == end) continue;
          split_invariant_row_sum(rows, g.inner, positions.data() + begin, end - begin, 0, g.count,
                                  block + i * g.inner, scratch.data());
        }
      });
    }
  });
}

// GatherElements and piper.GatherElementsGrad: indices (and the gathered tensor) have the
// data's rank; element e of the indices picks data at e's position with the axis coordinate
// replaced by the index. Walked line by line along the axis.
struct ElementsGeometry {
  std::string op;
  int64_t axis_size = 0, count = 0;
  int64_t inner = 1;  // the data's stride along the axis
  StridedLoop loop;   // over the indices' shape with the axis dropped: (indices, data) offsets
  const int64_t* indices = nullptr;
};

// The geometry of a checked GatherElements, piper.GatherElementsGrad or ScatterElements whose
// data has shape `data`.
ElementsGeometry elements_geometry(const KernelArgs& args, int64_t axis, const Shape& data) {
  const TensorView& indices = args.input(1);
  const int64_t rank = static_cast<int64_t>(data.size());
  ElementsGeometry g;
  g.op = args.op();
  g.axis_size = data[axis];
  g.count = indices.shape[axis];  // indices per line
  const std::vector<int64_t> is = contiguous_strides(indices.shape), ds = contiguous_strides(data);
  Shape rest;
  std::vector<int64_t> rest_is, rest_ds;
  for (int64_t d = 0; d < rank; ++d) {
    if (d == axis) continue;
    rest.push_back(indices.shape[d]);
    rest_is.push_back(is[d]);
    rest_ds.push_back(ds[d]);
  }
  g.inner = ds[axis];  // the data's stride along the axis
  g.loop = StridedLoop(rest, {rest_is, rest_ds});
  g.indices = indices.as<const int64_t>();
  return g;
}

// Calls f(indices offset, data offset) for every index. Lines (the positions off the axis)
// spread over threads; each line's indices run in order, and different lines address different
// data elements, so scatters into the data are race-free and keep their order.
template <typename F>
void for_each_element(const ElementsGeometry& g, int64_t index_stride, F&& f) {
  const int64_t si = g.loop.inner_stride(0), sd = g.loop.inner_stride(1);
  g.loop.parallel_for_each_row([&](const int64_t* offsets, int64_t n) {
    for (int64_t r = 0; r < n; ++r) {
      const int64_t ibase = offsets[0] + r * si, dbase = offsets[1] + r * sd;
      for (int64_t j = 0; j < g.count; ++j) {
        const int64_t at = ibase + j * index_stride;
        const int64_t i = checked_index(g.op, g.indices[at], g.axis_size, at);
        f(at, dbase + i * g.inner);
      }
    }
  });
}

int64_t axis_stride(const KernelArgs& args, const Shape& shape) {
  const int64_t axis =
      args.normalize_axis(args.attributes().get_int("axis", 0), static_cast<int64_t>(shape.size()));
  return contiguous_strides(shape)[axis];
}

std::unique_ptr<PreparedKernel> gather_elements_factory(const KernelArgs& args) {
  const int64_t axis = check_gather_elements(args, false);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  const ElementsGeometry g = elements_geometry(args, axis, x.shape);
  const int64_t stride = axis_stride(args, y.shape);
  const size_t size = dtype_size(y.dtype);
  return make_kernel(
      [g, stride, size, px = x.as<const uint8_t>(), py = y.as<uint8_t>()](const StepContext&) {
        for_each_element(g, stride, [&](int64_t out, int64_t in) {
          std::memcpy(py + out * size, px + in * size, size);
        });
      });
}

std::unique_ptr<PreparedKernel> gather_elements_grad_factory(const KernelArgs& args) {
  const int64_t axis = check_gather_elements(args, true);
  const TensorView& dy = args.input(0);
  const TensorView& dx = args.output(0);
  const ElementsGeometry g = elements_geometry(args, axis, dx.shape);
  const int64_t stride = axis_stride(args, dy.shape);
  return make_kernel([g, stride, pdy = dy.as<const float>(), pdx = dx.as<float>(),
                      total = dx.elements()](const StepContext&) {
    std::fill(pdx, pdx + total, 0.0f);
    for_each_element(g, stride, [&](int64_t from, int64_t to) { pdx[to] += pdy[from]; });
  });
}

// ScatterElements: Y = data with each update combined into the element its index picks, in
// the order of the updates (a repeated index with reduction none keeps the last update).
template <typename T>
std::unique_ptr<PreparedKernel> make_scatter_elements(const ElementsGeometry& g, int64_t stride,
                                                      ScatterReduction reduction,
                                                      const KernelArgs& args) {
  return make_kernel([g, stride, reduction, px = args.input(0).as<const T>(),
                      pu = args.input(2).as<const T>(), py = args.output(0).as<T>(),
                      total = args.output(0).elements()](const StepContext&) {
    if (py != px) std::copy(px, px + total, py);
    for_each_element(
        g, stride, [&](int64_t from, int64_t to) { combine_update(reduction, py[to], pu[from]); });
  });
}

std::unique_ptr<PreparedKernel> scatter_elements_factory(const KernelArgs& args) {
  const int64_t axis = check_scatter_elements(args);
  const TensorView& y = args.output(0);
  const ScatterReduction reduction = check_scatter_reduction(args, y.dtype);
  const ElementsGeometry g = elements_geometry(args, axis, y.shape);
  const int64_t stride = axis_stride(args, args.input(1).shape);
  return by_scatter_type(
      y.dtype, [&]<typename T>() { return make_scatter_elements<T>(g, stride, reduction, args); });
}

// ONNX OneHot: output = indices' shape with `depth` inserted at `axis`; off_value everywhere
// but on_value where the inserted coordinate equals the index (negative indices count from
// the end; indices outside [-depth, depth) give all-off rows).
template <typename T, typename I>
std::unique_ptr<PreparedKernel> make_one_hot(const TensorView& indices, const TensorView& values,
                                             const TensorView& y, const AxisLines& lines) {
  return make_kernel([outer = lines.outer, depth = lines.n, inner = lines.inner,
                      pi = indices.as<const I>(), pv = values.as<const T>(), py = y.as<T>(),
                      total = y.elements()](const StepContext&) {
    const T off = pv[0], on = pv[1];
    std::fill(py, py + total, off);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t k = 0; k < inner; ++k) {
        int64_t index = static_cast<int64_t>(pi[o * inner + k]);
        if (index < 0) index += depth;
        if (index >= 0 && index < depth) py[(o * depth + index) * inner + k] = on;
      }
    }
  });
}

std::unique_ptr<PreparedKernel> one_hot_factory(const KernelArgs& args) {
  const AxisLines lines = check_one_hot(args);
  const TensorView& indices = args.input(0);
  const TensorView& values = args.input(2);
  const TensorView& y = args.output(0);
  const bool int_indices = indices.dtype == plan::INT64;
  if (y.dtype == plan::INT64) {
    return int_indices ? make_one_hot<int64_t, int64_t>(indices, values, y, lines)
                       : make_one_hot<int64_t, float>(indices, values, y, lines);
  }
  return int_indices ? make_one_hot<float, int64_t>(indices, values, y, lines)
                     : make_one_hot<float, float>(indices, values, y, lines);
}

// ArgMax / ArgMin: the first (or with select_last_index the last) extreme element along
// `axis`. NaN counts as the extreme, as in numpy.
template <typename T, bool kMax>
std::unique_ptr<PreparedKernel> make_arg_extreme(const TensorView& x, const TensorView& y,
                                                 const AxisLines& lines, bool last) {
  return make_kernel([lines, last, px = x.as<const T>(), py = y.as<int64_t>()](const StepContext&) {
    const auto better = [](T a, T b) { return more_extreme<kMax>(a, b); };
    for (int64_t o = 0; o < lines.outer; ++o) {
      for (int64_t k = 0; k < lines.inner; ++k) {
        const T* line = px + o * lines.n * lines.inner + k;
        int64_t best = 0;
        for (int64_t j = 1; j < lines.n; ++j) {
          const T v = line[j * lines.inner], b = line[best * lines.inner];
          if (better(v, b) || (last && !better(b, v))) best = j;
        }
        py[o * lines.inner + k] = best;
      }
    }
  });
}

template <bool kMax>
std::unique_ptr<PreparedKernel> arg_extreme_factory(const KernelArgs& args) {
  bool last = false;
  const AxisLines lines = check_arg_extreme(args, last);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  if (x.dtype == plan::INT64) return make_arg_extreme<int64_t, kMax>(x, y, lines, last);
  return make_arg_extreme<float, kMax>(x, y, lines, last);
}

// ONNX TopK: the k largest (or smallest) elements along `axis`, sorted, with their indices;
// equal values keep their original order (the lower index first). K comes from the output
// shape; the K input is only checked.
template <typename T>
std::unique_ptr<PreparedKernel> make_top_k(const std::string& op, const TensorView& x,
                                           const int64_t* k_input, const TensorView& values,
                                           const TensorView& indices, const AxisLines& lines,
                                           int64_t k, bool largest) {
  return make_kernel(
      [op, k_input, lines, k, largest, px = x.as<const T>(), pv = values.as<T>(),
       pi = indices.as<int64_t>(), order = std::vector<int64_t>(static_cast<size_t>(lines.n)),
       line = std::vector<T>(static_cast<size_t>(lines.n))](const StepContext&) mutable {
        const auto before = [&](int64_t a, int64_t b) {
          return top_k_before(line[a], line[b], a, b, largest);
        };
        if (*k_input != k) throw Error(top_k_error(op, *k_input, k));
        for (int64_t o = 0; o < lines.outer; ++o) {
          for (int64_t c = 0; c < lines.inner; ++c) {
            const T* in = px + o * lines.n * lines.inner + c;
            for (int64_t j = 0; j < lines.n; ++j) line[j] = in[j * lines.inner];
            std::iota(order.begin(), order.end(), int64_t{0});
            std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
            const int64_t base = o * k * lines.inner + c;
            for (int64_t j = 0; j < k; ++j) {
              pv[base + j * lines.inner] = line[order[j]];
              pi[base + j * lines.inner] = order[j];
            }
          }
        }
      });
}

std::unique_ptr<PreparedKernel> top_k_factory(const KernelArgs& args) {
  const TopK top = check_top_k(args);
  const TensorView& x = args.input(0);
  const TensorView& values = args.output(0);
  const TensorView& indices = args.output(1);
  const int64_t* pk = args.input(1).as<const int64_t>();
  if (x.dtype == plan::INT64) {
    return make_top_k<int64_t>(args.op(), x, pk, values, indices, top.lines, top.k, top.largest);
  }
  return make_top_k<float>(args.op(), x, pk, values, indices, top.lines, top.k, top.largest);
}

// X seen as [outer, n, inner] around `axis`.
AxisLines axis_lines(const Shape& shape, int64_t axis) {
  return {product(shape, 0, axis), shape[axis], product(shape, axis + 1, shape.size())};
}

}  // namespace

namespace {

// The checks GatherElements, its gradient and ScatterElements share: `indexed` (the gathered
// tensor, or the updates) has the indices' shape, which has the data's rank and is no larger
// off the axis. Returns the axis.
int64_t check_elements_indices(const KernelArgs& args, const Shape& data, const TensorView& indexed,
                               const std::string& indexed_what) {
  const TensorView& indices = args.input(1);
  args.expect_dtype(indices, plan::INT64, "indices (input 1)");
  if (indices.shape != indexed.shape) {
    args.fail(indexed_what + " has shape " + shape_string(indexed.shape) +
              " but the indices have " + shape_string(indices.shape) + "; they must be equal");
  }
  const int64_t rank = static_cast<int64_t>(data.size());
  if (indices.rank() != rank || rank == 0) {
    args.fail("indices " + shape_string(indices.shape) + " must have the rank of the data " +
              shape_string(data) + " (at least 1)");
  }
  const int64_t axis = args.normalize_axis(args.attributes().get_int("axis", 0), rank);
  for (int64_t d = 0; d < rank; ++d) {
    if (d != axis && indices.shape[d] > data[d]) {
      args.fail("indices " + shape_string(indices.shape) + " exceed the data " +
                shape_string(data) + " in dimension " + std::to_string(d));
    }
  }
  return axis;
}

}  // namespace

GatherOperands check_gather_operands(const KernelArgs& args, bool grad) {
  args.expect_inputs(2, 2);
  args.expect_outputs(1, 1);
  const TensorView& gathered = grad ? args.input(0) : args.output(0);
  const TensorView& data = grad ? args.output(0) : args.input(0);
  if (grad) {
    args.expect_dtype(gathered, plan::FLOAT32, "dY (input 0)");
    args.expect_dtype(data, plan::FLOAT32, "dX (output 0)");
  } else {
    args.expect_dtype(data, gathered.dtype, "data (input 0)");
  }
  return {gathered, data};
}

GatherAxis check_gather(const KernelArgs& args, bool grad) {
  const auto [gathered, data] = check_gather_operands(args, grad);
  const TensorView& indices = args.input(1);
  const std::string gathered_what = grad ? "dY (input 0)" : "the output";
  args.expect_dtype(indices, plan::INT64, "indices (input 1)");
  const int64_t rank = data.rank();
  if (rank == 0) args.fail("data must have at least one dimension");
  const int64_t axis = args.normalize_axis(args.attributes().get_int("axis", 0), rank);
  const Shape& shape = data.shape;
  Shape expected(shape.begin(), shape.begin() + axis);
  expected.insert(expected.end(), indices.shape.begin(), indices.shape.end());
  expected.insert(expected.end(), shape.begin() + axis + 1, shape.end());
  if (expected != gathered.shape) {
    args.fail("gathering " + shape_string(shape) + " along axis " + std::to_string(axis) +
              " with indices " + shape_string(indices.shape) + " gives " + shape_string(expected) +
              " but " + gathered_what + " has shape " + shape_string(gathered.shape));
  }
  GatherAxis g;
  g.outer = product(shape, 0, axis);
  g.axis_size = shape[axis];
  g.inner = product(shape, axis + 1, shape.size());
  g.count = indices.elements();
  return g;
}

int64_t check_gather_elements(const KernelArgs& args, bool grad) {
  const auto [gathered, data] = check_gather_operands(args, grad);
  return check_elements_indices(args, data.shape, gathered, grad ? "dY (input 0)" : "the output");
}

ScatterOperands check_scatter_operands(const KernelArgs& args) {
  args.expect_inputs(3, 3);
  args.expect_outputs(1, 1);
  const TensorView& data = args.input(0);
  const TensorView& updates = args.input(2);
  const TensorView& y = args.output(0);
  args.expect_dtype(data, y.dtype, "data (input 0)");
  args.expect_dtype(updates, y.dtype, "updates (input 2)");
  args.expect_same_shape(data, "data (input 0)", y, "the output");
  return {data, updates};
}

int64_t check_scatter_elements(const KernelArgs& args) {
  const auto [data, updates] = check_scatter_operands(args);
  return check_elements_indices(args, data.shape, updates, "updates (input 2)");
}

AxisLines check_arg_extreme(const KernelArgs& args, bool& last) {
  args.expect_inputs(1, 1);
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(y, plan::INT64, "output 0");
  if (x.rank() == 0) args.fail("the input must have at least one dimension");
  const int64_t axis = args.normalize_axis(args.attributes().get_int("axis", 0), x.rank());
  const bool keepdims = args.attributes().get_int("keepdims", 1) != 0;
  last = args.attributes().get_int("select_last_index", 0) != 0;
  Shape expected = x.shape;
  if (keepdims) {
    expected[axis] = 1;
  } else {
    expected.erase(expected.begin() + axis);
  }
  if (expected != y.shape) {
    args.fail("reducing " + shape_string(x.shape) + " along axis " + std::to_string(axis) +
              " with keepdims=" + std::to_string(keepdims) + " gives " + shape_string(expected) +
              " but the output has shape " + shape_string(y.shape));
  }
  if (x.shape[axis] == 0) args.fail("cannot reduce an empty axis " + std::to_string(axis));
  if (x.dtype != plan::INT64) args.expect_dtype(x, plan::FLOAT32, "input 0");
  return axis_lines(x.shape, axis);
}

TopK check_top_k(const KernelArgs& args) {
  args.expect_inputs(2, 2);
  args.expect_outputs(2, 2);
  const TensorView& x = args.input(0);
  const TensorView& values = args.output(0);
  const TensorView& indices = args.output(1);
  args.expect_dtype(values, x.dtype, "values (output 0)");
  args.expect_dtype(indices, plan::INT64, "indices (output 1)");
  if (x.rank() == 0) args.fail("the input must have at least one dimension");
  const int64_t axis = args.normalize_axis(args.attributes().get_int("axis", -1), x.rank());
  args.expect_same_shape(values, "values (output 0)", indices, "indices (output 1)");
  Shape expected = x.shape;
  expected[axis] = values.rank() == x.rank() ? values.shape[axis] : -1;
  if (expected != values.shape || values.shape[axis] > x.shape[axis]) {
    args.fail("values " + shape_string(values.shape) + " must match the input " +
              shape_string(x.shape) + " except along axis " + std::to_string(axis) +
              ", where K may not exceed the input's size");
  }
  const TensorView& k_input = args.input(1);
  args.expect_dtype(k_input, plan::INT64, "K (input 1)");
  if (k_input.elements() != 1) args.fail("K (input 1) must hold one value");
  if (x.dtype != plan::INT64) args.expect_dtype(x, plan::FLOAT32, "input 0");
  return {axis_lines(x.shape, axis), values.shape[axis],
          args.attributes().get_int("largest", 1) != 0};
}

std::string top_k_error(const std::string& op, int64_t k_input, int64_t k) {
  return op + ": K (input 1) is " + std::to_string(k_input) +
         " but the plan's output shape was computed for K = " + std::to_string(k);
}

AxisLines check_one_hot(const KernelArgs& args) {
  args.expect_inputs(3, 3);
  args.expect_outputs(1, 1);
  const TensorView& indices = args.input(0);
  const TensorView& values = args.input(2);
  const TensorView& y = args.output(0);
  args.expect_dtype(values, y.dtype, "values (input 2)");
  if (values.elements() != 2) {
    args.fail("values (input 2) must hold [off_value, on_value], got shape " +
              shape_string(values.shape));
  }
  if (y.rank() != indices.rank() + 1) {
    args.fail("the output " + shape_string(y.shape) + " must have one more dimension than the " +
              "indices " + shape_string(indices.shape));
  }
  const int64_t axis = args.normalize_axis(args.attributes().get_int("axis", -1), y.rank());
  Shape expected = indices.shape;
  expected.insert(expected.begin() + axis, y.shape[axis]);
  if (expected != y.shape) {
    args.fail("indices " + shape_string(indices.shape) + " with depth " +
              std::to_string(y.shape[axis]) + " at axis " + std::to_string(axis) + " give " +
              shape_string(expected) + " but the output has shape " + shape_string(y.shape));
  }
  if (indices.dtype != plan::INT64) args.expect_dtype(indices, plan::FLOAT32, "indices (input 0)");
  if (y.dtype != plan::INT64) args.expect_dtype(y, plan::FLOAT32, "output 0");
  return axis_lines(y.shape, axis);
}

void register_indexing_kernels(KernelTable& table) {
  table["Gather"] = gather_factory;
  table["piper.GatherGrad"] = gather_grad_factory;
  table["GatherElements"] = gather_elements_factory;
  table["piper.GatherElementsGrad"] = gather_elements_grad_factory;
  table["ScatterElements"] = scatter_elements_factory;
  table["OneHot"] = one_hot_factory;
  table["ArgMax"] = arg_extreme_factory<true>;
  table["ArgMin"] = arg_extreme_factory<false>;
  table["TopK"] = top_k_factory;
}

}  // namespace piper::engine::cpu
