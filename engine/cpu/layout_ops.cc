// Kernels that copy elements between layouts without arithmetic: ONNX Concat,
// Split, Slice, Expand, Tile, Where, Trilu, and piper.SliceGrad (Slice's adjoint:
// the slice written into zeros). They work on any dtype by element size.
// Output shapes come from the plan; shape-like inputs are checked against them.
#include <algorithm>
#include <cstring>

#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/op_checks.h"
#include "engine/cpu/parallel.h"
#include "engine/cpu/slice_geometry.h"
#include "engine/cpu/strided_loop.h"
#include "formats/error.h"

namespace piper::engine::cpu {
namespace {

// Calls f.template operator()<T>() with T an unsigned integer of the dtype's size.
template <typename F>
auto by_element_size(plan::DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 8:
      return f.template operator()<uint64_t>();
    case 4:
      return f.template operator()<uint32_t>();
    default:
      return f.template operator()<uint8_t>();
  }
}

// Calls f(o) for every outer index o, spread over parallel.h's threads.
template <typename F>
void for_each_outer(const JoinGeometry& p, F f) {
  const auto bytes = static_cast<int64_t>(std::max<size_t>(p.joined_row, 1));
  parallel_for(p.outer, (4 * kParallelGrain + bytes - 1) / bytes, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) f(o);
  });
}

std::unique_ptr<PreparedKernel> concat_factory(const KernelArgs& args) {
  const JoinGeometry p = check_concat(args);
  const TensorView& y = args.output(0);
  std::vector<const uint8_t*> sources;
  for (size_t i = 0; i < args.num_inputs(); ++i)
    sources.push_back(args.input(i).as<const uint8_t>());
  return make_kernel([p, sources, py = y.as<uint8_t>()](const StepContext&) {
    for_each_outer(p, [&](int64_t o) {
      uint8_t* out = py + static_cast<size_t>(o) * p.joined_row;
      for (size_t i = 0; i < sources.size(); ++i) {
        std::memcpy(out, sources[i] + static_cast<size_t>(o) * p.part_rows[i], p.part_rows[i]);
        out += p.part_rows[i];
      }
    });
  });
}

// Split: the part sizes are the outputs' (from the plan); a `split` input, when given, must
// agree with them.
std::unique_ptr<PreparedKernel> split_factory(const KernelArgs& args) {
  const JoinGeometry p = check_split(args);
  const TensorView& x = args.input(0);
  std::vector<uint8_t*> targets;
  for (size_t i = 0; i < args.num_outputs(); ++i) targets.push_back(args.output(i).as<uint8_t>());
  if (args.has_input(1)) {
    const TensorView& split = args.input(1);
    const int64_t* values = split.as<const int64_t>();
    check_split_sizes(args, p, std::vector<int64_t>(values, values + split.elements()));
  }
  return make_kernel([p, targets, px = x.as<const uint8_t>()](const StepContext&) {
    for_each_outer(p, [&](int64_t o) {
      const uint8_t* in = px + static_cast<size_t>(o) * p.joined_row;
      for (size_t i = 0; i < targets.size(); ++i) {
        std::memcpy(targets[i] + static_cast<size_t>(o) * p.part_rows[i], in, p.part_rows[i]);
        in += p.part_rows[i];
      }
    });
  });
}

// Slice's starts, ends, axes and steps inputs, read when the kernel is prepared and again
// before each run (they are plan constants in practice; a change re-plans the walk).
class SliceInputs {
 public:
  explicit SliceInputs(std::vector<TensorView> views) : views_(std::move(views)) {
    values_ = read();
  }

  // True (and the values updated) when an input changed since the last call.
  bool refresh() {
    bool same = true;
    for (size_t i = 0; same && i < views_.size(); ++i) {
      const int64_t* data = views_[i].present() ? views_[i].as<const int64_t>() : nullptr;
      same = data == nullptr || std::equal(values_[i].begin(), values_[i].end(), data);
    }
    if (same) return false;
    values_ = read();
    return true;
  }
  SliceParameters parameters() const { return slice_parameters(views_, values_); }

 private:
  std::vector<std::vector<int64_t>> read() const {
    std::vector<std::vector<int64_t>> values;
    for (const TensorView& view : views_) {
      const int64_t* data = view.present() ? view.as<const int64_t>() : nullptr;
      values.emplace_back(data, data ? data + view.elements() : data);
    }
    return values;
  }

  std::vector<TensorView> views_;
  std::vector<std::vector<int64_t>> values_;
};

// The walk over the sliced region: the offset of the first element in the data, and a loop
// over the sliced tensor (contiguous) and the data (strided).
struct SliceWalk {
  int64_t base = 0;
  StridedLoop loop;  // operands: (sliced tensor contiguous, data strided)
};

SliceWalk slice_walk(const std::string& op, const SliceInputs& in, const Shape& data,
                     const Shape& sliced) {
  const SliceGeometry geometry = slice_geometry(op, in.parameters(), data, sliced);
  SliceWalk walk;
  walk.base = geometry.base;
  walk.loop = StridedLoop(sliced, {contiguous_strides(sliced), geometry.strides});
  return walk;
}

// Slice (backward = false): y = x[slice]. piper.SliceGrad (backward = true): dX = zeros with
// dX[slice] = dY.
std::unique_ptr<PreparedKernel> slice_kernel(const KernelArgs& args, bool backward) {
  SliceInputs inputs(check_slice(args));
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  const TensorView& data = backward ? y : x;
  const TensorView& sliced = backward ? x : y;
  SliceWalk walk = slice_walk(args.op(), inputs, data.shape, sliced.shape);
  return by_element_size(y.dtype, [&]<typename T>() {
    return make_kernel([op = args.op(), inputs, walk, data_shape = data.shape,
                        sliced_shape = sliced.shape, backward, px = x.as<const T>(), py = y.as<T>(),
                        total = y.elements()](const StepContext&) mutable {
      if (inputs.refresh()) walk = slice_walk(op, inputs, data_shape, sliced_shape);
      if (!backward) {
        strided_copy(walk.loop, px + walk.base, py);
        return;
      }
      parallel_for(total, kParallelGrain,
                   [&](int64_t begin, int64_t end) { std::fill(py + begin, py + end, T{0}); });
      const int64_t ss = walk.loop.inner_stride(0), sd = walk.loop.inner_stride(1);
      T* out = py + walk.base;
      walk.loop.parallel_for_each_row([&](const int64_t* offsets, int64_t n) {
        for (int64_t i = 0; i < n; ++i) out[offsets[1] + i * sd] = px[offsets[0] + i * ss];
      });
    });
  });
}

// Expand: x broadcast to the output's shape (which the shape input produced at planning).
std::unique_ptr<PreparedKernel> expand_factory(const KernelArgs& args) {
  check_expand(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  const StridedLoop loop(y.shape,
                         {contiguous_strides(y.shape), broadcast_strides(x.shape, y.shape)});
  return by_element_size(y.dtype, [&]<typename T>() {
    return make_kernel([loop, px = x.as<const T>(), py = y.as<T>()](const StepContext&) {
      strided_copy(loop, px, py);
    });
  });
}

// Tile: a strided copy of the input into every tile of the output.
std::unique_ptr<PreparedKernel> tile_factory(const KernelArgs& args) {
  const TileWalk walk = check_tile(args);
  const StridedLoop loop(walk.shape, {walk.output_strides, walk.input_strides});
  return by_element_size(args.output(0).dtype, [&]<typename T>() {
    return make_kernel([loop, px = args.input(0).as<const T>(), py = args.output(0).as<T>()](
                           const StepContext&) { strided_copy(loop, px, py); });
  });
}

// Where: out = condition ? x : y, all three broadcast to the output.
std::unique_ptr<PreparedKernel> where_factory(const KernelArgs& args) {
  args.expect_inputs(3, 3);
  args.expect_outputs(1, 1);
  const TensorView& c = args.input(0);
  const TensorView& x = args.input(1);
  const TensorView& y = args.input(2);
  const TensorView& out = args.output(0);
  args.expect_dtype(c, plan::BOOL, "condition (input 0)");
  args.expect_dtype(x, out.dtype, "X (input 1)");
  args.expect_dtype(y, out.dtype, "Y (input 2)");
  args.expect_broadcast({c, x, y}, out);
  const StridedLoop loop(
      out.shape, {contiguous_strides(out.shape), broadcast_strides(c.shape, out.shape),
                  broadcast_strides(x.shape, out.shape), broadcast_strides(y.shape, out.shape)});
  return by_element_size(out.dtype, [&]<typename T>() {
    return make_kernel([loop, pc = c.as<const uint8_t>(), px = x.as<const T>(),
                        py = y.as<const T>(), po = out.as<T>()](const StepContext&) {
      const int64_t sc = loop.inner_stride(1), sx = loop.inner_stride(2), sy = loop.inner_stride(3);
      loop.parallel_for_each_row([&](const int64_t* offsets, int64_t n) {
        T* o = po + offsets[0];
        const uint8_t* cond = pc + offsets[1];
        const T* a = px + offsets[2];
        const T* b = py + offsets[3];
        for (int64_t i = 0; i < n; ++i) o[i] = cond[i * sc] ? a[i * sx] : b[i * sy];
      });
    });
  });
}

// Trilu: the upper (j - i >= k) or lower (j - i <= k) triangle of each matrix in the last
// two dimensions, zeros elsewhere. The optional k input is read at run time.
std::unique_ptr<PreparedKernel> trilu_factory(const KernelArgs& args) {
  check_trilu(args);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  const int64_t* pk = args.has_input(1) ? args.input(1).as<const int64_t>() : nullptr;
  const bool upper = args.attributes().get_int("upper", 1) != 0;
  const int64_t rows = x.shape[x.rank() - 2], cols = x.shape[x.rank() - 1];
  const int64_t matrices = rows * cols == 0 ? 0 : x.elements() / (rows * cols);
  return by_element_size(y.dtype, [&]<typename T>() {
    return make_kernel([pk, upper, rows, cols, matrices, px = x.as<const T>(),
                        py = y.as<T>()](const StepContext&) {
      const int64_t k = pk ? *pk : 0;
      parallel_for(matrices * rows, (kParallelGrain + cols - 1) / std::max<int64_t>(cols, 1),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t r = begin; r < end; ++r) {
                       const int64_t i = r % rows;
                       const T* in = px + r * cols;
                       T* out = py + r * cols;
                       // Kept columns [lo, hi).
                       const int64_t lo = upper ? std::max<int64_t>(0, std::min(i + k, cols)) : 0;
                       const int64_t hi =
                           upper ? cols : std::max<int64_t>(0, std::min(i + k + 1, cols));
                       std::fill(out, out + lo, T{0});
                       if (hi > lo) {
                         std::memmove(out + lo, in + lo, static_cast<size_t>(hi - lo) * sizeof(T));
                       }
                       std::fill(out + std::max(lo, hi), out + cols, T{0});
                     }
                   });
    });
  });
}

}  // namespace

JoinGeometry check_join(const KernelArgs& args, const TensorView& joined,
                        const std::vector<const TensorView*>& parts, const std::string& part_kind) {
  if (joined.rank() == 0) args.fail("cannot concatenate or split a scalar");
  JoinGeometry p;
  p.axis = args.normalize_axis(args.attributes().get_int("axis", 0), joined.rank());
  const size_t element = dtype_size(joined.dtype);
  const int64_t inner = product(joined.shape, p.axis + 1, joined.shape.size());
  p.outer = product(joined.shape, 0, p.axis);
  p.joined_row = static_cast<size_t>(joined.shape[p.axis] * inner) * element;
  int64_t total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const TensorView& part = *parts[i];
    const std::string what = part_kind + " " + std::to_string(i);
    args.expect_dtype(part, joined.dtype, what);
    Shape expected = joined.shape;
    expected[p.axis] = part.rank() == joined.rank() ? part.shape[p.axis] : -1;
    if (part.shape != expected) {
      args.fail(what + " has shape " + shape_string(part.shape) + ", which does not match " +
                shape_string(joined.shape) + " outside axis " + std::to_string(p.axis));
    }
    total += part.shape[p.axis];
    p.part_rows.push_back(static_cast<size_t>(part.shape[p.axis] * inner) * element);
  }
  if (total != joined.shape[p.axis]) {
    args.fail("the " + part_kind + "s add up to " + std::to_string(total) + " along axis " +
              std::to_string(p.axis) + " but the joined tensor has " +
              std::to_string(joined.shape[p.axis]));
  }
  return p;
}

JoinGeometry check_concat(const KernelArgs& args) {
  if (args.num_inputs() < 1) args.fail("takes at least one input, the plan gives none");
  args.expect_outputs(1, 1);
  std::vector<const TensorView*> parts;
  for (size_t i = 0; i < args.num_inputs(); ++i) parts.push_back(&args.input(i));
  return check_join(args, args.output(0), parts, "input");
}

JoinGeometry check_split(const KernelArgs& args) {
  args.expect_inputs(1, 2);
  if (args.num_outputs() < 1) args.fail("produces at least one output, the plan gives none");
  std::vector<const TensorView*> parts;
  for (size_t i = 0; i < args.num_outputs(); ++i) parts.push_back(&args.output(i));
  const JoinGeometry join = check_join(args, args.input(0), parts, "output");
  if (args.has_input(1)) args.expect_dtype(args.input(1), plan::INT64, "split (input 1)");
  return join;
}

void check_split_sizes(const KernelArgs& args, const JoinGeometry& join,
                       const std::vector<int64_t>& sizes) {
  bool agree = sizes.size() == args.num_outputs();
  for (size_t i = 0; agree && i < sizes.size(); ++i) {
    agree = sizes[i] == args.output(i).shape[static_cast<size_t>(join.axis)];
  }
  if (!agree) {
    args.fail("split (input 1) " + shape_string(sizes) +
              " does not match the outputs' sizes along axis " + std::to_string(join.axis));
  }
}

void check_expand(const KernelArgs& args) {
  args.expect_inputs(1, 2);
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, y.dtype, "input 0");
  if (!broadcasts_to(x.shape, y.shape)) {
    args.fail("input " + shape_string(x.shape) + " does not broadcast to the output " +
              shape_string(y.shape));
  }
}

TileWalk check_tile(const KernelArgs& args) {
  args.expect_inputs(2, 2);
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  const TensorView& y = args.output(0);
  args.expect_dtype(x, y.dtype, "input 0");
  const TensorView& repeats = args.input(1);
  args.expect_dtype(repeats, plan::INT64, "repeats (input 1)");
  if (repeats.rank() != 1 || repeats.elements() != x.rank() || y.rank() != x.rank()) {
    args.fail("repeats " + shape_string(repeats.shape) + " must hold one value per dimension " +
              "of the input " + shape_string(x.shape) + ", whose rank the output " +
              shape_string(y.shape) + " must have");
  }
  const std::vector<int64_t> x_strides = contiguous_strides(x.shape);
  TileWalk walk;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    const int64_t size = x.shape[d];
    if (size == 0 ? y.shape[d] != 0 : y.shape[d] % size != 0) {
      args.fail("the output " + shape_string(y.shape) + " is no whole number of tiles of the " +
                "input " + shape_string(x.shape) + " in dimension " + std::to_string(d));
    }
    walk.shape.push_back(size == 0 ? 0 : y.shape[d] / size);
    walk.shape.push_back(size);
    walk.input_strides.push_back(0);
    walk.input_strides.push_back(x_strides[d]);
  }
  walk.output_strides = contiguous_strides(walk.shape);
  return walk;
}

void check_trilu(const KernelArgs& args) {
  args.expect_inputs(1, 2);
  args.expect_outputs(1, 1);
  const TensorView& x = args.input(0);
  args.expect_dtype(x, args.output(0).dtype, "input 0");
  args.expect_same_shape(x, "input 0", args.output(0), "output 0");
  if (x.rank() < 2) args.fail("the input must have at least two dimensions");
  if (args.has_input(1)) {
    const TensorView& k = args.input(1);
    args.expect_dtype(k, plan::INT64, "k (input 1)");
    if (k.elements() != 1) args.fail("k (input 1) must hold one value");
  }
}

void register_layout_kernels(KernelTable& table) {
  table["Concat"] = concat_factory;
  table["Split"] = split_factory;
  table["Slice"] = [](const KernelArgs& args) { return slice_kernel(args, false); };
  table["piper.SliceGrad"] = [](const KernelArgs& args) { return slice_kernel(args, true); };
  table["Expand"] = expand_factory;
  table["Tile"] = tile_factory;
  table["Where"] = where_factory;
  table["Trilu"] = trilu_factory;
}

}  // namespace piper::engine::cpu
