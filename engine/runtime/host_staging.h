// Runs kernels that need host memory (CPU kernels, Gloo's transfers) on tensors in
// a device backend's memory, by copying them to host buffers around every run.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "engine/runtime/backend.h"

namespace piper::engine {

// Prepares a kernel on host buffers given the host views of its inputs and outputs.
using HostPrepare = std::function<std::unique_ptr<PreparedKernel>(std::vector<TensorView> inputs,
                                                                  std::vector<TensorView> outputs)>;

// Prepares `prepare`'s kernel on host copies of `inputs` and `outputs` (in `device`'s memory),
// taken now, so that constant inputs hold their values. Each run downloads every tensor, runs
// the host kernel and uploads every tensor back: kernels may update inputs in place (the
// optimizers do). Tensors that overlap in device memory overlap alike in host memory. Omitted
// tensors stay omitted. `device` must outlive the kernel.
std::unique_ptr<PreparedKernel> prepare_on_host(Backend& device, std::vector<TensorView> inputs,
                                                std::vector<TensorView> outputs,
                                                const HostPrepare& prepare);

}  // namespace piper::engine
