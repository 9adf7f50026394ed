#include "tests/gpu/op_harness.h"

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "engine/cpu/bfloat16.h"
#include "engine/cpu/cpu_backend.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

// Host bytes of `spec`: its values, or random ones from `random`.
std::vector<uint8_t> host_values(const TensorSpec& spec, std::mt19937& random) {
  const int64_t n = num_elements(spec.shape);
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * dtype_size(spec.dtype));
  for (int64_t i = 0; i < n; ++i) {
    double v = 0.0;
    if (!spec.values.empty()) {
      v = spec.values.at(static_cast<size_t>(i) % spec.values.size());
    } else if (spec.dtype == plan::FLOAT32 || spec.dtype == plan::BFLOAT16) {
      v = std::uniform_real_distribution<double>(spec.low, spec.high)(random);
    } else {
      v = static_cast<double>(std::uniform_int_distribution<int64_t>(
          static_cast<int64_t>(spec.low), static_cast<int64_t>(spec.high) - 1)(random));
    }
    switch (spec.dtype) {
      case plan::FLOAT32: {
        const auto f = static_cast<float>(v);
        std::memcpy(bytes.data() + i * 4, &f, 4);
        break;
      }
      case plan::BFLOAT16: {
        const cpu::BFloat16 b(static_cast<float>(v));
        std::memcpy(bytes.data() + i * 2, &b, 2);
        break;
      }
      case plan::INT64: {
        const auto x = static_cast<int64_t>(v);
        std::memcpy(bytes.data() + i * 8, &x, 8);
        break;
      }
      default:
        bytes[static_cast<size_t>(i)] = v != 0.0 ? 1 : 0;
        break;
    }
  }
  return bytes;
}

// Every tensor of a case in one backend's memory.
struct Tensors {
  Backend& backend;
  std::vector<void*> data;
  ~Tensors() {
    for (void* p : data) backend.release(p);
  }
};

// Runs `c` on `backend` from `values` (inputs, then outputs) and returns every tensor's bytes.
std::vector<std::vector<uint8_t>> run_case(Backend& backend, const OpCase& c,
                                           const std::vector<std::vector<uint8_t>>& values,
                                           const std::function<void()>& after_run) {
  plan::Kernel kernel;
  kernel.set_op_type(c.op);
  for (const auto& attribute : c.attributes) *kernel.add_attributes() = attribute;
  *kernel.mutable_dropout() = c.dropout;
  Tensors tensors{backend, {}};
  std::vector<TensorView> inputs, outputs;
  size_t k = 0;
  for (const auto* specs : {&c.inputs, &c.outputs}) {
    for (const TensorSpec& spec : *specs) {
      TensorView view;
      if (spec.dtype != plan::DTYPE_UNSPECIFIED) {
        view = TensorView{backend.allocate(values[k].size()), spec.dtype, spec.shape};
        tensors.data.push_back(view.data);
        backend.upload(view.data, values[k].data(), values[k].size());
      }
      (specs == &c.inputs ? inputs : outputs).push_back(view);
      (specs == &c.inputs ? kernel.add_inputs(-1) : kernel.add_outputs(-1));
      ++k;
    }
  }
  std::unique_ptr<PreparedKernel> prepared = backend.prepare(kernel, inputs, outputs);
  for (int step = 1; step <= c.steps; ++step) prepared->run(StepContext{step, 7, step});
  after_run();
  std::vector<std::vector<uint8_t>> result;
  for (const auto* views : {&inputs, &outputs}) {
    for (const TensorView& view : *views) {
      std::vector<uint8_t> bytes(view.present() ? view.bytes() : 0);
      backend.download(bytes.data(), view.data, bytes.size());
      result.push_back(std::move(bytes));
    }
  }
  return result;
}

// The float32 values of bfloat16 `bytes`.
std::vector<uint8_t> widened(const std::vector<uint8_t>& bytes) {
  std::vector<uint8_t> floats(bytes.size() * 2);
  cpu::widen(reinterpret_cast<const cpu::BFloat16*>(bytes.data()),
             reinterpret_cast<float*>(floats.data()), static_cast<int64_t>(bytes.size() / 2));
  return floats;
}

// Expects two tensors to agree: floats within the tolerance (NaN where both are NaN; bfloat16
// compared as the float32 values it widens to), other dtypes bit for bit; names the tensor
// and its largest difference otherwise.
void expect_same(const OpCase& c, const TensorSpec& spec, const std::string& what,
                 const std::vector<uint8_t>& cuda_bytes, const std::vector<uint8_t>& cpu_bytes) {
  ASSERT_EQ(cuda_bytes.size(), cpu_bytes.size()) << c.name << " " << what;
  if (spec.dtype != plan::FLOAT32 && spec.dtype != plan::BFLOAT16) {
    EXPECT_TRUE(cuda_bytes == cpu_bytes) << c.name << " " << what << ": CUDA and CPU differ";
    return;
  }
  const bool bf16 = spec.dtype == plan::BFLOAT16;
  const std::vector<uint8_t> cuda = bf16 ? widened(cuda_bytes) : cuda_bytes;
  const std::vector<uint8_t> cpu = bf16 ? widened(cpu_bytes) : cpu_bytes;
  const auto* a = reinterpret_cast<const float*>(cuda.data());
  const auto* b = reinterpret_cast<const float*>(cpu.data());
  double worst = 0.0;
  size_t worst_at = 0, bad = 0;
  for (size_t i = 0; i < cuda.size() / 4; ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    const double diff = std::abs(static_cast<double>(a[i]) - b[i]);
    const bool ok = diff <= c.atol + c.rtol * std::abs(b[i]) || (std::isinf(a[i]) && a[i] == b[i]);
    if (!ok) ++bad;
    if (!ok && (std::isnan(diff) || diff > worst || bad == 1)) {
      worst = diff;
      worst_at = i;
    }
  }
  EXPECT_EQ(bad, 0u) << c.name << " " << what << ": " << bad << " elements differ; largest "
                     << worst << " at element " << worst_at << " (cuda " << a[worst_at] << ", cpu "
                     << b[worst_at] << "), tolerance " << c.atol << " + " << c.rtol << " * |cpu|";
}

// The case's tensors: random inputs (seeded by the case's name), and outputs poisoned, so that
// an element a backend leaves unwritten differs.
std::vector<std::vector<uint8_t>> case_values(const OpCase& c) {
  std::mt19937 random(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
  std::vector<std::vector<uint8_t>> values;
  for (const auto* specs : {&c.inputs, &c.outputs}) {
    for (TensorSpec spec : *specs) {
      if (spec.dtype == plan::DTYPE_UNSPECIFIED) {
        values.emplace_back();
        continue;
      }
      if (specs == &c.outputs) {
        const bool floats = spec.dtype == plan::FLOAT32 || spec.dtype == plan::BFLOAT16;
        spec.values = {floats ? 12345.0 : 3.0};
      }
      values.push_back(host_values(spec, random));
    }
  }
  return values;
}

// Outputs `first` and `first + 1` (RowMax, RowInvSum) become RowMax − log RowInvSum and 1.
void as_log_sum_exp(std::vector<std::vector<uint8_t>>& tensors, size_t first) {
  auto* row_max = reinterpret_cast<float*>(tensors[first].data());
  auto* row_inv_sum = reinterpret_cast<float*>(tensors[first + 1].data());
  for (size_t i = 0; i < tensors[first].size() / 4; ++i) {
    row_max[i] -= std::log(row_inv_sum[i]);
    row_inv_sum[i] = 1.0f;
  }
}

}  // namespace

std::unique_ptr<cuda::CudaBackend> MakeCudaBackend(std::string& reason) {
  try {
    return std::make_unique<cuda::CudaBackend>();
  } catch (const Error& error) {
    reason = error.what();
    return nullptr;
  }
}

void CudaTest::SetUp() {
  std::string reason;
  cuda_ = MakeCudaBackend(reason);
  if (!cuda_) GTEST_SKIP() << reason;
}

void CudaVsCpu::SetUp() {
  std::string reason;
  cuda_ = MakeCudaBackend(reason);
  if (!cuda_) GTEST_SKIP() << reason;
}

void ExpectSameOnCudaAndCpu(cuda::CudaBackend& cuda, const OpCase& c) {
  const std::vector<std::vector<uint8_t>> values = case_values(c);
  cpu::CpuBackend cpu;
  auto expected = run_case(cpu, c, values, [] {});
  auto actual =
      run_case(cuda, c, values, [&cuda] { cuda.context().check_faults(cuda.context().stream()); });
  const bool row_statistics = c.op == "piper.FusedAttention" && c.outputs.size() == 3 &&
                              c.outputs[1].dtype != plan::DTYPE_UNSPECIFIED;
  if (row_statistics) {
    as_log_sum_exp(expected, c.inputs.size() + 1);
    as_log_sum_exp(actual, c.inputs.size() + 1);
  }
  size_t k = 0;
  for (size_t i = 0; i < c.inputs.size(); ++i, ++k) {
    expect_same(c, c.inputs[i], "input " + std::to_string(i), actual[k], expected[k]);
  }
  for (size_t i = 0; i < c.outputs.size(); ++i, ++k) {
    expect_same(c, c.outputs[i], "output " + std::to_string(i), actual[k], expected[k]);
  }
}

TEST_P(CudaVsCpu, AgreesWithTheCpuBackend) { ExpectSameOnCudaAndCpu(*cuda_, GetParam()); }

std::string CaseName(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Elementwise, CudaVsCpu, ::testing::ValuesIn(ElementwiseCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Activation, CudaVsCpu, ::testing::ValuesIn(ActivationCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Gemm, CudaVsCpu, ::testing::ValuesIn(GemmCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Reduce, CudaVsCpu, ::testing::ValuesIn(ReduceCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Layout, CudaVsCpu, ::testing::ValuesIn(LayoutCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Normalization, CudaVsCpu, ::testing::ValuesIn(NormalizationCases()),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(Indexing, CudaVsCpu, ::testing::ValuesIn(IndexingCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Loss, CudaVsCpu, ::testing::ValuesIn(LossCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Optimizer, CudaVsCpu, ::testing::ValuesIn(OptimizerCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Fused, CudaVsCpu, ::testing::ValuesIn(FusedCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Slicing, CudaVsCpu, ::testing::ValuesIn(SlicingCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Dropout, CudaVsCpu, ::testing::ValuesIn(DropoutCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Power, CudaVsCpu, ::testing::ValuesIn(PowerCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(ExtremumGrad, CudaVsCpu, ::testing::ValuesIn(ExtremumGradCases()),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(Selection, CudaVsCpu, ::testing::ValuesIn(SelectionCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Scan, CudaVsCpu, ::testing::ValuesIn(ScanCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(GatherElements, CudaVsCpu, ::testing::ValuesIn(GatherElementsCases()),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(NdIndexing, CudaVsCpu, ::testing::ValuesIn(NdIndexingCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Einsum, CudaVsCpu, ::testing::ValuesIn(EinsumCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(HostFallback, CudaVsCpu, ::testing::ValuesIn(HostFallbackCases()),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(Bfloat16, CudaVsCpu, ::testing::ValuesIn(Bfloat16Cases()), CaseName);
INSTANTIATE_TEST_SUITE_P(FlashAttention, CudaVsCpu, ::testing::ValuesIn(FlashAttentionCases()),
                         CaseName);

std::vector<OpCase> AllCases() {
  std::vector<OpCase> all;
  for (const auto& cases :
       {ElementwiseCases(),   GemmCases(),         ReduceCases(),   LayoutCases(),
        NormalizationCases(), IndexingCases(),     LossCases(),     OptimizerCases(),
        FusedCases(),         SlicingCases(),      DropoutCases(),  PowerCases(),
        ExtremumGradCases(),  SelectionCases(),    ScanCases(),     GatherElementsCases(),
        EinsumCases(),        HostFallbackCases(), Bfloat16Cases(), FlashAttentionCases(),
        ActivationCases(),    NdIndexingCases()}) {
    all.insert(all.end(), cases.begin(), cases.end());
  }
  return all;
}

// Every case is a valid kernel for the CPU backend (this needs no GPU, so it runs everywhere).
TEST(KernelHarness, EveryCaseRunsOnTheCpu) {
  cpu::CpuBackend cpu;
  for (const OpCase& c : AllCases()) {
    try {
      run_case(cpu, c, case_values(c), [] {});
    } catch (const std::exception& error) {
      ADD_FAILURE() << c.name << ": " << error.what();
    }
  }
}

// Every op with a CUDA kernel has a case (the table needs no GPU, so this runs everywhere).
TEST(CudaKernelTable, EveryOpHasACase) {
  cuda::CudaKernelTable table;
  cuda::register_elementwise_kernels(table);
  cuda::register_gemm_kernels(table);
  cuda::register_reduce_kernels(table);
  cuda::register_layout_kernels(table);
  cuda::register_normalization_kernels(table);
  cuda::register_indexing_kernels(table);
  cuda::register_loss_kernels(table);
  cuda::register_optimizer_kernels(table);
  cuda::register_fused_kernels(table);
  cuda::register_slicing_kernels(table);
  cuda::register_dropout_kernels(table);
  cuda::register_power_kernels(table);
  cuda::register_extremum_grad_kernels(table);
  cuda::register_selection_kernels(table);
  cuda::register_scan_kernels(table);
  cuda::register_gather_elements_kernels(table);
  cuda::register_einsum_kernels(table);
  std::set<std::string> tested;
  for (const OpCase& c : AllCases()) tested.insert(c.op);
  for (const auto& [op, factory] : table) EXPECT_TRUE(tested.count(op)) << op << " has no case";
  // Every op whose CUDA kernel takes bfloat16 has a bfloat16 case.
  std::set<std::string> tested_in_bf16;
  for (const OpCase& c : Bfloat16Cases()) tested_in_bf16.insert(c.op);
  for (const std::string& op : cuda::CudaBackend::bfloat16_ops()) {
    EXPECT_TRUE(table.count(op)) << op << " takes bfloat16 but has no CUDA kernel";
    EXPECT_TRUE(tested_in_bf16.count(op)) << op << " has no bfloat16 case";
  }
}

}  // namespace piper::engine::testing
