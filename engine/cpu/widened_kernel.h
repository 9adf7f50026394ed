// bfloat16 tensors for float32 kernels: the CPU computes bfloat16 ops in float32, as PyTorch's
// CPU kernels do. Before each run the kernel's bfloat16 tensors are widened into float32
// copies it owns; after it, the outputs are rounded back to nearest even.
#pragma once

#include <memory>
#include <vector>

#include "engine/cpu/kernel_registry.h"

namespace piper::engine::cpu {

// Whether any tensor of a kernel is bfloat16.
bool has_bfloat16(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs);

// `factory`'s kernel prepared on float32 copies of the bfloat16 tensors among `inputs` and
// `outputs` (a tensor that is both shares one copy). Outputs are widened too, for kernels that
// add into them.
std::unique_ptr<PreparedKernel> prepare_widened(const KernelFactory& factory,
                                                const plan::Kernel& kernel,
                                                std::vector<TensorView> inputs,
                                                std::vector<TensorView> outputs);

}  // namespace piper::engine::cpu
