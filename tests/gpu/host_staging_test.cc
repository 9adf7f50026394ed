// prepare_on_host, the staging of host kernels over a device backend's tensors, checked
// with the CPU backend as the "device" (it needs no GPU): aliasing is kept, in-place
// updates come back, omitted tensors stay omitted.
#include "engine/runtime/host_staging.h"

#include <gtest/gtest.h>

#include "engine/cpu/cpu_backend.h"
#include "tests/unit/engine_test_util.h"

namespace piper::engine::testing {
namespace {

TEST(HostStaging, KeepsAliasingAndWritesInPlaceUpdatesBack) {
  cpu::CpuBackend device;
  auto* memory = static_cast<float*>(device.allocate(8 * sizeof(float)));
  for (int i = 0; i < 8; ++i) memory[i] = static_cast<float>(i);
  // A kernel adding its input (elements 0..3) to its output (elements 2..5), which overlap.
  const TensorView in{memory, plan::FLOAT32, {4}};
  const TensorView out{memory + 2, plan::FLOAT32, {4}};
  std::vector<float*> seen;
  auto kernel = prepare_on_host(
      device, {in, TensorView{}}, {out}, [&](std::vector<TensorView> i, std::vector<TensorView> o) {
        EXPECT_FALSE(i[1].present());
        EXPECT_EQ(i[0].as<float>() + 2, o[0].as<float>()) << "the overlap is kept";
        EXPECT_NE(i[0].data, in.data) << "the kernel sees host copies";
        EXPECT_EQ(i[0].as<float>()[3], 3.0f) << "copied when prepared";
        return cpu::make_kernel([x = i[0].as<float>(), y = o[0].as<float>()](const StepContext&) {
          for (int k = 3; k >= 0; --k) y[k] += x[k];
        });
      });
  kernel->run(StepContext{});
  EXPECT_EQ(std::vector<float>(memory, memory + 8), (std::vector<float>{0, 1, 2, 4, 6, 8, 6, 7}));
  device.release(memory);
}

}  // namespace
}  // namespace piper::engine::testing
