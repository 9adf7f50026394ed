// The kernels piper-run --profile-costs times (engine/runtime/cost_profile.h): for each op type
// of transformer training, a family of instances of growing size, each a plan kernel with the
// shapes and dtypes of its inputs and outputs, and the size the cost model indexes its curve by
// (formats/measured_costs.h: FLOPs for products and attention, else bytes read and written).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/runtime/tensor.h"
#include "formats/measured_costs.h"
#include "schemas/plan.pb.h"

namespace piper::engine {

struct ProfileTensor {
  plan::DType dtype = plan::FLOAT32;
  Shape shape;
  // A bool [..., T, T] mask true above the diagonal (the keys a query may not see), as a
  // decoder's attention masks them; else the values cost_profile.cc gives every kernel.
  bool causal = false;
};

// One kernel to time.
struct ProfileKernel {
  plan::Kernel kernel;  // op type and attributes; inputs and outputs are the lists below
  std::vector<ProfileTensor> inputs;
  std::vector<ProfileTensor> outputs;
  // Output 0 shares input 0's memory, as the plan's memory planner lays out a reshape.
  bool view = false;
  double flops = 0;  // for families indexed by FLOPs
};

struct ProfileFamily {
  std::string op_type;
  std::string dtype;  // "float32" or "bfloat16"
  formats::CostKey key = formats::CostKey::kBytes;
  std::vector<int64_t> scales;                 // in increasing size
  std::function<ProfileKernel(int64_t)> make;  // the instance of one scale
};

// Products timed on a grid of shapes (formats::MeasuredProducts): every [m, k] x [k, n] with m, n
// and k from `sizes`, in each layout ("nn", "nt", "tn").
struct ProductGrid {
  std::string dtype;  // "float32" or "bfloat16"
  std::vector<int64_t> sizes;
  std::vector<std::string> layouts;
};

// The grids, `quick`: two sizes only.
std::vector<ProductGrid> product_grids(bool quick);

// The piper.MatMul of one grid point.
ProfileKernel product_kernel(const ProductGrid& grid, int64_t m, int64_t n, int64_t k,
                             const std::string& layout);

// The families, `quick`: fewer and smaller instances (seconds in all, for tests).
std::vector<ProfileFamily> profile_families(bool quick);

// The size the family's curve is indexed by: its FLOPs, or the bytes of every input and output.
double profile_size(const ProfileFamily& family, const ProfileKernel& kernel);

}  // namespace piper::engine
