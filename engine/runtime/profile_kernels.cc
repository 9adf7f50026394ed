#include "engine/runtime/profile_kernels.h"

#include <utility>

namespace piper::engine {
namespace {

using formats::CostKey;

constexpr plan::DType kF32 = plan::FLOAT32;

plan::Kernel kernel_of(const std::string& op_type) {
  plan::Kernel kernel;
  kernel.set_op_type(op_type);
  return kernel;
}

void add_int(plan::Kernel& kernel, const std::string& name, int64_t value) {
  plan::Attribute* attribute = kernel.add_attributes();
  attribute->set_name(name);
  attribute->set_i(value);
}

void add_float(plan::Kernel& kernel, const std::string& name, double value) {
  plan::Attribute* attribute = kernel.add_attributes();
  attribute->set_name(name);
  attribute->set_f(value);
}

void add_string(plan::Kernel& kernel, const std::string& name, const std::string& value) {
  plan::Attribute* attribute = kernel.add_attributes();
  attribute->set_name(name);
  attribute->set_s(value);
}

void add_ints(plan::Kernel& kernel, const std::string& name, const std::vector<int64_t>& values) {
  plan::Attribute* attribute = kernel.add_attributes();
  attribute->set_name(name);
  for (int64_t value : values) attribute->mutable_ints()->add_values(value);
}

ProfileKernel make(plan::Kernel kernel, std::vector<ProfileTensor> inputs,
                   std::vector<ProfileTensor> outputs) {
  return {std::move(kernel), std::move(inputs), std::move(outputs)};
}

// Element counts 4^k: from 256 (dispatch-bound) to 16M floats (64 MiB, past every cache).
std::vector<int64_t> element_scales(bool quick) {
  std::vector<int64_t> scales;
  for (int64_t n = 256; n <= (quick ? (int64_t{1} << 14) : (int64_t{1} << 24)); n *= 4) {
    scales.push_back(n);
  }
  return scales;
}

// [elements / width, width], at least one row.
Shape rows_of(int64_t elements, int64_t width) {
  return {std::max<int64_t>(elements / width, 1), width};
}

// piper.MatMul's element type for a family's or grid's dtype.
plan::DType product_type(const std::string& dtype) {
  return dtype == "bfloat16" ? plan::BFLOAT16 : kF32;
}

// C = A B of [s, s] matrices: dispatch-bound at 16, past the caches at 1536.
ProfileFamily matmul_family(const std::string& dtype, bool quick) {
  const plan::DType type = product_type(dtype);
  ProfileFamily family{"piper.MatMul", dtype, CostKey::kFlops, {}, nullptr};
  family.scales = quick ? std::vector<int64_t>{16, 32, 64}
                        : std::vector<int64_t>{16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536};
  family.make = [type](int64_t s) {
    ProfileKernel kernel =
        make(kernel_of("piper.MatMul"), {{type, {s, s}}, {type, {s, s}}}, {{type, {s, s}}});
    kernel.flops = formats::product_flops(static_cast<double>(s), static_cast<double>(s),
                                          static_cast<double>(s));
    return kernel;
  };
  return family;
}

// Causal-style attention of 8 heads of width 64 over t queries and keys (the mask all false: the
// kernels' work does not depend on it).
plan::Kernel attention_kernel(const std::string& op_type) {
  plan::Kernel kernel = kernel_of(op_type);
  add_float(kernel, "scale", 0.125);
  add_float(kernel, "fill", -1e30);
  add_int(kernel, "fill_if", 1);
  return kernel;
}

constexpr int64_t kHeads = 8;
constexpr int64_t kHeadWidth = 64;

ProfileFamily attention_family(bool gradient, bool quick) {
  const std::string op_type = gradient ? "piper.FusedAttentionGrad" : "piper.FusedAttention";
  ProfileFamily family{op_type, "float32", CostKey::kFlops, {}, nullptr};
  family.scales =
      quick ? std::vector<int64_t>{16, 32} : std::vector<int64_t>{16, 32, 64, 128, 256, 512, 1024};
  family.make = [op_type, gradient](int64_t t) {
    const Shape rows = {1, kHeads, t, kHeadWidth};
    const Shape keys = {1, kHeads, kHeadWidth, t};
    const Shape stats = {1, kHeads, t, 1};
    // Causal, as decoders train: the CPU's kernels skip the keys it leaves out of whole blocks.
    const ProfileTensor mask{plan::BOOL, {1, 1, t, t}, /*causal=*/true};
    ProfileKernel kernel =
        gradient ? make(attention_kernel(op_type),
                        {{kF32, rows},
                         {kF32, rows},
                         {kF32, keys},
                         {kF32, rows},
                         mask,
                         {kF32, stats},
                         {kF32, stats},
                         {kF32, rows}},
                        {{kF32, rows}, {kF32, keys}, {kF32, rows}})
                 : make(attention_kernel(op_type), {{kF32, rows}, {kF32, keys}, {kF32, rows}, mask},
                        {{kF32, rows}, {kF32, stats}, {kF32, stats}});
    const auto size = [](int64_t value) { return static_cast<double>(value); };
    kernel.flops = formats::attention_flops(size(kHeads), size(t), size(kHeadWidth), size(t),
                                            size(kHeadWidth), gradient);
    return kernel;
  };
  return family;
}

// A family over element counts whose instance `shape_kernel(n)` builds.
ProfileFamily elements_family(const std::string& op_type, bool quick,
                              std::function<ProfileKernel(int64_t)> shape_kernel) {
  return {op_type, "float32", CostKey::kBytes, element_scales(quick), std::move(shape_kernel)};
}

}  // namespace

// From dispatch-bound to past the caches in each size, 32^3 to 2048^3 (17 GFLOP), in steps of
// 2: a rate can halve between 1024 and 2048, where operands leave the cache (two ranks on a
// CPU), so that steps of 4 mispriced the products between by a quarter.
std::vector<ProductGrid> product_grids(bool quick) {
  const std::vector<int64_t> sizes = quick
                                         ? std::vector<int64_t>{16, 64}
                                         : std::vector<int64_t>{32, 64, 128, 256, 512, 1024, 2048};
  const std::vector<std::string> layouts = {"nn", "nt", "tn"};
  return {{"float32", sizes, layouts}, {"bfloat16", sizes, layouts}};
}

ProfileKernel product_kernel(const ProductGrid& grid, int64_t m, int64_t n, int64_t k,
                             const std::string& layout) {
  const plan::DType type = product_type(grid.dtype);
  const bool trans_a = layout[0] == 't';
  const bool trans_b = layout[1] == 't';
  plan::Kernel kernel = kernel_of("piper.MatMul");
  add_int(kernel, "transA", trans_a);
  add_int(kernel, "transB", trans_b);
  const Shape a = trans_a ? Shape{k, m} : Shape{m, k};
  const Shape b = trans_b ? Shape{n, k} : Shape{k, n};
  ProfileKernel product = make(kernel, {{type, a}, {type, b}}, {{type, {m, n}}});
  product.flops = formats::product_flops(static_cast<double>(m), static_cast<double>(n),
                                         static_cast<double>(k));
  return product;
}

std::vector<ProfileFamily> profile_families(bool quick) {
  std::vector<ProfileFamily> families;
  families.push_back(matmul_family("float32", quick));
  families.push_back(matmul_family("bfloat16", quick));
  families.push_back(attention_family(false, quick));
  families.push_back(attention_family(true, quick));
  families.push_back(elements_family("Add", quick, [](int64_t n) {
    return make(kernel_of("Add"), {{kF32, {n}}, {kF32, {n}}}, {{kF32, {n}}});
  }));
  families.push_back(elements_family("Reshape", quick, [](int64_t n) {
    ProfileKernel kernel =
        make(kernel_of("Reshape"), {{kF32, {n}}, {plan::INT64, {2}}}, {{kF32, {n / 16, 16}}});
    kernel.view = true;
    return kernel;
  }));
  families.push_back(elements_family("Transpose", quick, [](int64_t n) {
    plan::Kernel kernel = kernel_of("Transpose");
    add_ints(kernel, "perm", {1, 0, 2});
    const int64_t rows = std::max<int64_t>(n / (4 * 64), 1);
    return make(kernel, {{kF32, {rows, 4, 64}}}, {{kF32, {4, rows, 64}}});
  }));
  for (const char* op_type : {"piper.BiasGelu", "piper.BiasGeluGrad"}) {
    const bool gradient = std::string(op_type) == "piper.BiasGeluGrad";
    families.push_back(elements_family(op_type, quick, [op_type, gradient](int64_t n) {
      plan::Kernel kernel = kernel_of(op_type);
      add_string(kernel, "approximate", "none");
      const Shape x = rows_of(n, 1024);
      const Shape bias = {x[1]};
      if (!gradient) return make(kernel, {{kF32, x}, {kF32, bias}}, {{kF32, x}});
      return make(kernel, {{kF32, x}, {kF32, x}, {kF32, bias}}, {{kF32, x}, {kF32, bias}});
    }));
  }
  families.push_back(elements_family("LayerNormalization", quick, [](int64_t n) {
    plan::Kernel kernel = kernel_of("LayerNormalization");
    add_int(kernel, "axis", -1);
    add_float(kernel, "epsilon", 1e-5);
    const Shape x = rows_of(n, 256);
    const Shape stats = {x[0], 1};
    return make(kernel, {{kF32, x}, {kF32, {x[1]}}, {kF32, {x[1]}}},
                {{kF32, x}, {kF32, stats}, {kF32, stats}});
  }));
  families.push_back(elements_family("piper.LayerNormalizationGrad", quick, [](int64_t n) {
    plan::Kernel kernel = kernel_of("piper.LayerNormalizationGrad");
    add_int(kernel, "axis", 1);
    const Shape x = rows_of(n, 256);
    const Shape stats = {x[0], 1};
    return make(kernel, {{kF32, x}, {kF32, x}, {kF32, {x[1]}}, {kF32, stats}, {kF32, stats}},
                {{kF32, x}, {kF32, {x[1]}}, {kF32, {x[1]}}});
  }));
  families.push_back(elements_family("Softmax", quick, [](int64_t n) {
    plan::Kernel kernel = kernel_of("Softmax");
    add_int(kernel, "axis", -1);
    const Shape x = rows_of(n, 256);
    return make(kernel, {{kF32, x}}, {{kF32, x}});
  }));
  families.push_back(elements_family("piper.SoftmaxGrad", quick, [](int64_t n) {
    plan::Kernel kernel = kernel_of("piper.SoftmaxGrad");
    add_int(kernel, "axis", -1);
    const Shape x = rows_of(n, 256);
    return make(kernel, {{kF32, x}, {kF32, x}}, {{kF32, x}});
  }));
  for (const char* op_type : {"SoftmaxCrossEntropyLoss", "piper.SoftmaxCrossEntropyLossGrad"}) {
    const bool gradient = std::string(op_type) == "piper.SoftmaxCrossEntropyLossGrad";
    families.push_back(elements_family(op_type, quick, [op_type, gradient](int64_t n) {
      plan::Kernel kernel = kernel_of(op_type);
      add_string(kernel, "reduction", "mean");
      add_int(kernel, "ignore_index", -100);
      const Shape scores = rows_of(n, 512);
      const ProfileTensor labels{plan::INT64, {scores[0]}};
      if (!gradient) return make(kernel, {{kF32, scores}, labels}, {{kF32, {}}});
      return make(kernel, {{kF32, {}}, {kF32, scores}, labels}, {{kF32, scores}});
    }));
  }
  families.push_back(elements_family("piper.SumTo", quick, [](int64_t n) {
    const Shape x = rows_of(n, 512);
    return make(kernel_of("piper.SumTo"), {{kF32, x}}, {{kF32, {x[1]}}});
  }));
  families.push_back(elements_family("piper.SumSquares", quick, [](int64_t n) {
    plan::Kernel kernel = kernel_of("piper.SumSquares");
    add_ints(kernel, "starts", {0});
    add_ints(kernel, "counts", {n});
    return make(kernel, {{kF32, {n}}}, {{kF32, {}}});
  }));
  families.push_back(elements_family("piper.AdamW", quick, [](int64_t n) {
    plan::Kernel kernel = kernel_of("piper.AdamW");
    add_float(kernel, "lr", 1e-3);
    add_float(kernel, "beta1", 0.9);
    add_float(kernel, "beta2", 0.999);
    add_float(kernel, "eps", 1e-8);
    add_float(kernel, "weight_decay", 0.01);
    return make(kernel, {{kF32, {n}}, {kF32, {n}}, {kF32, {n}}, {kF32, {n}}}, {});
  }));
  return families;
}

double profile_size(const ProfileFamily& family, const ProfileKernel& kernel) {
  if (family.key == formats::CostKey::kFlops) return kernel.flops;
  double bytes = 0;
  for (const auto* tensors : {&kernel.inputs, &kernel.outputs}) {
    for (const ProfileTensor& tensor : *tensors) {
      bytes += static_cast<double>(num_elements(tensor.shape) *
                                   static_cast<int64_t>(dtype_size(tensor.dtype)));
    }
  }
  return bytes;
}

}  // namespace piper::engine
