// The CUDA backend and the NCCL communicators are a plugin, libpiper_cuda.so, loaded only when
// --device cuda or --comm nccl asks for them: a CPU rank maps none of the CUDA libraries
// (libcublasLt alone kept 61 MiB resident in every CPU rank). The plugin is built from
// engine/cuda and engine/comm/nccl alone and resolves every other engine symbol from the
// executable that loads it (cmake/PiperCuda.cmake, piper_loads_cuda_plugin).
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace piper::engine {

class Backend;
class CommunicatorFactory;
class Store;

// What the plugin offers; the entry point below returns it.
struct CudaPlugin {
  // The CUDA backend; throws piper::Error in one line, suggesting --device cpu, when no GPU is
  // usable.
  std::unique_ptr<Backend> (*make_backend)();
  // make_nccl_communicators (backend.h) for the CUDA backend.
  std::unique_ptr<CommunicatorFactory> (*make_nccl_communicators)(
      Backend& backend, Store& store, int rank, const std::string& key_prefix,
      std::chrono::milliseconds timeout);
};

// The plugin's file name, found through the loading executable's run path.
inline constexpr const char* kCudaPluginFile = "libpiper_cuda.so";
// The plugin's one exported symbol: extern "C" const CudaPlugin* piper_cuda_plugin().
inline constexpr const char* kCudaPluginEntry = "piper_cuda_plugin";

// The plugin, loaded on first use and then kept. Throws piper::Error when the build has no CUDA
// or the plugin cannot be loaded (with the loader's reason), naming `flag`, what asked for it
// ("--device cuda"), and ending with `instead`, what to do ("run with --device cpu").
const CudaPlugin& cuda_plugin(const std::string& flag, const std::string& instead);

}  // namespace piper::engine
