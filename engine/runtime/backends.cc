// The registry of compute backends behind --device, and the defaults of Backend's optional
// methods.
#include <dlfcn.h>
#include <unistd.h>

#include <cstring>

#include "engine/comm/communicator.h"
#include "engine/comm/store.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/cuda_plugin.h"
#include "formats/error.h"

namespace piper::engine {

void Backend::copy(void* device_dst, const void* device_src, size_t bytes) {
  if (bytes != 0) std::memmove(device_dst, device_src, bytes);
}

std::unique_ptr<DeviceStreams> Backend::make_device_streams(size_t, int) { return nullptr; }

size_t Backend::memory_capacity() const {
  return static_cast<size_t>(::sysconf(_SC_PHYS_PAGES)) *
         static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

#ifdef PIPER_HAVE_CUDA
namespace {

const CudaPlugin* load_cuda_plugin(std::string& why) {
  // RTLD_NOW: a symbol the executable does not export fails here, not mid-run.
  void* library = dlopen(kCudaPluginFile, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    why = dlerror();
    return nullptr;
  }
  auto* entry = reinterpret_cast<const CudaPlugin* (*)()>(dlsym(library, kCudaPluginEntry));
  if (entry == nullptr) {
    why = std::string(kCudaPluginFile) + " has no " + kCudaPluginEntry;
    return nullptr;
  }
  return entry();
}

}  // namespace

const CudaPlugin& cuda_plugin(const std::string& flag, const std::string& instead) {
  static std::string why;
  static const CudaPlugin* const plugin = load_cuda_plugin(why);
  if (plugin == nullptr) {
    throw Error(flag + ": cannot load the CUDA backend: " + why + "; " + instead);
  }
  return *plugin;
}
#else
const CudaPlugin& cuda_plugin(const std::string& flag, const std::string& instead) {
  throw Error(flag + ": this build has no CUDA (configured without nvcc or with " +
              "-DPIPER_CUDA=OFF); " + instead);
}
#endif

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") {
    return std::make_unique<cpu::CpuBackend>();
  }
  if (name == "cuda") {
    return cuda_plugin("--device cuda", "run with --device cpu").make_backend();
  }
  throw Error("unknown device '" + name + "'; available devices: cpu, cuda");
}

std::string default_communicator(const std::string& device) {
  return device == "cuda" ? "nccl" : "gloo";
}

std::unique_ptr<CommunicatorFactory> make_nccl_communicators(Backend& backend, Store& store,
                                                             int rank,
                                                             const std::string& key_prefix,
                                                             std::chrono::milliseconds timeout) {
  return cuda_plugin("--comm nccl", "use --comm gloo")
      .make_nccl_communicators(backend, store, rank, key_prefix, timeout);
}

}  // namespace piper::engine
