// The registry of compute backends behind --device.
#include "engine/cpu/cpu_backend.h"
#include "engine/runtime/backend.h"
#include "formats/error.h"

namespace piper::engine {

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") {
    return std::make_unique<cpu::CpuBackend>();
  }
  throw Error("unknown device '" + name + "'; available devices: cpu");
}

}  // namespace piper::engine
