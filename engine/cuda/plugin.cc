// The entry point of libpiper_cuda.so (engine/runtime/cuda_plugin.h).
#include "engine/comm/nccl/nccl_communicator.h"
#include "engine/comm/store.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/runtime/cuda_plugin.h"
#include "formats/error.h"

namespace piper::engine::cuda {
namespace {

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

std::unique_ptr<CommunicatorFactory> make_nccl(Backend& backend, Store& store, int rank,
                                               const std::string& key_prefix,
                                               std::chrono::milliseconds timeout) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr) {
    throw Error("--comm nccl works on GPU memory: it needs --device cuda, not --device " +
                backend.name() + " (use --comm gloo)");
  }
  NcclOptions options;
  options.timeout = timeout;
  options.key_prefix = key_prefix;
  return std::make_unique<NcclCommunicatorFactory>(store, rank, cuda->context(), options);
}

constexpr CudaPlugin kPlugin{&make_cuda_backend, &make_nccl};

}  // namespace
}  // namespace piper::engine::cuda

extern "C" __attribute__((visibility("default"))) const piper::engine::CudaPlugin*
piper_cuda_plugin() {
  return &piper::engine::cuda::kPlugin;
}
