// The kernel harness: one op run on the CUDA and the CPU backend from the same random
// inputs, every tensor compared afterwards (outputs, and inputs, which the optimizers
// update in place). Cases are listed per op family (*_ops_test.cc); the coverage test
// checks that every op with a CUDA kernel has one.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/cuda/cuda_backend.h"
#include "schemas/plan.pb.h"

namespace piper::engine::testing {

struct TensorSpec {
  Shape shape;
  plan::DType dtype = plan::FLOAT32;
  // Random values uniform in [low, high) (integers: [low, high)), unless `values` is given.
  double low = -1.0, high = 1.0;
  std::vector<double> values = {};
};

struct OpCase {
  std::string name = {};  // unique, for the test's name
  std::string op = {};
  std::vector<plan::Attribute> attributes = {};
  std::vector<TensorSpec> inputs = {};  // dtype DTYPE_UNSPECIFIED: omitted (Omitted())
  std::vector<TensorSpec> outputs = {};
  double rtol = 1e-5, atol = 1e-6;
  int steps = 1;                  // runs, with StepContext::step 1, 2, ...
  plan::DropoutKey dropout = {};  // Dropout's place in its whole tensor
};

inline void PrintTo(const OpCase& c, std::ostream* out) { *out << c.name; }

// An omitted optional tensor.
inline TensorSpec Omitted() { return TensorSpec{{}, plan::DTYPE_UNSPECIFIED}; }

// The CUDA backend, or null with `reason` set when no GPU is usable here.
std::unique_ptr<cuda::CudaBackend> MakeCudaBackend(std::string& reason);

// Runs `c` on both backends and expects every tensor to agree within the case's tolerance.
// piper.FusedAttention's RowMax and RowInvSum are compared as the log Σ exp(S) they give,
// RowMax − log RowInvSum: a backend may write any pair that gives it (cudnn_attention.h).
void ExpectSameOnCudaAndCpu(cuda::CudaBackend& cuda, const OpCase& c);

// The cases of each family.
std::vector<OpCase> ElementwiseCases();
std::vector<OpCase> ActivationCases();
std::vector<OpCase> GemmCases();
std::vector<OpCase> ReduceCases();
std::vector<OpCase> LayoutCases();
std::vector<OpCase> NormalizationCases();
std::vector<OpCase> IndexingCases();
std::vector<OpCase> LossCases();
std::vector<OpCase> OptimizerCases();
std::vector<OpCase> FusedCases();
std::vector<OpCase> SlicingCases();
std::vector<OpCase> DropoutCases();
std::vector<OpCase> PowerCases();
std::vector<OpCase> ExtremumGradCases();
std::vector<OpCase> SelectionCases();
std::vector<OpCase> ScanCases();
std::vector<OpCase> GatherElementsCases();
std::vector<OpCase> NdIndexingCases();
std::vector<OpCase> EinsumCases();
std::vector<OpCase> HostFallbackCases();
std::vector<OpCase> Bfloat16Cases();
std::vector<OpCase> FlashAttentionCases();

// A test fixture whose tests skip, naming the reason, where no GPU is usable.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override;
  std::unique_ptr<cuda::CudaBackend> cuda_;
};

class CudaVsCpu : public ::testing::TestWithParam<OpCase> {
 protected:
  void SetUp() override;
  std::unique_ptr<cuda::CudaBackend> cuda_;
};

}  // namespace piper::engine::testing
