// The registry of compute backends behind --device, and the defaults of Backend's optional
// methods.
#include <cstring>

#include "engine/comm/communicator.h"
#include "engine/comm/store.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/runtime/backend.h"
#include "formats/error.h"
#ifdef PIPER_HAVE_CUDA
#include "engine/comm/nccl/nccl_communicator.h"
#include "engine/cuda/cuda_backend.h"
#endif

namespace piper::engine {

void Backend::copy(void* device_dst, const void* device_src, size_t bytes) {
  if (bytes != 0) std::memmove(device_dst, device_src, bytes);
}

std::unique_ptr<DeviceStreams> Backend::make_device_streams(size_t, int) { return nullptr; }

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") {
    return std::make_unique<cpu::CpuBackend>();
  }
  if (name == "cuda") {
#ifdef PIPER_HAVE_CUDA
    return std::make_unique<cuda::CudaBackend>();
#else
    throw Error(
        "--device cuda: this build has no CUDA backend (configured without nvcc or with "
        "-DPIPER_CUDA=OFF); run with --device cpu");
#endif
  }
  throw Error("unknown device '" + name + "'; available devices: cpu, cuda");
}

std::string default_communicator(const std::string& device) {
  return device == "cuda" ? "nccl" : "gloo";
}

// Without CUDA the parameters go unused.
std::unique_ptr<CommunicatorFactory> make_nccl_communicators(
    [[maybe_unused]] Backend& backend, [[maybe_unused]] Store& store, [[maybe_unused]] int rank,
    [[maybe_unused]] const std::string& key_prefix,
    [[maybe_unused]] std::chrono::milliseconds timeout) {
#ifdef PIPER_HAVE_CUDA
  auto* cuda = dynamic_cast<cuda::CudaBackend*>(&backend);
  if (cuda == nullptr) {
    throw Error("--comm nccl works on GPU memory: it needs --device cuda, not --device " +
                backend.name() + " (use --comm gloo)");
  }
  NcclOptions options;
  options.timeout = timeout;
  options.key_prefix = key_prefix;
  return std::make_unique<NcclCommunicatorFactory>(store, rank, cuda->context(), options);
#else
  throw Error(
      "--comm nccl: this build has no CUDA (configured without nvcc or with "
      "-DPIPER_CUDA=OFF); use --comm gloo");
#endif
}

}  // namespace piper::engine
