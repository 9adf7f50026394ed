// The planner accepts an op only if the CPU engine can run it; gradient and
// optimizer ops are covered by gradient_check_test and the optimizer tests,
// which plan and run them.
#include <gtest/gtest.h>

#include "engine/cpu/cpu_backend.h"
#include "planner/autodiff/autodiff.h"

namespace piper {
namespace {

TEST(OpCoverage, EveryOpThePlannerAcceptsHasACpuKernel) {
  const auto kernels = engine::cpu::CpuBackend().supported_ops();
  for (const std::string& type : planner::supported_op_types()) {
    EXPECT_TRUE(std::binary_search(kernels.begin(), kernels.end(), type))
        << "the planner accepts " << type << " but the CPU backend has no kernel for it";
  }
  for (const char* type : {"piper.SGD", "piper.AdamW"}) {
    EXPECT_TRUE(std::binary_search(kernels.begin(), kernels.end(), std::string(type))) << type;
  }
}

}  // namespace
}  // namespace piper
