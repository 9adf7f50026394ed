// The compute backend interface: memory and kernels for one device. The CPU
// backend (engine/cpu) is the reference; a CUDA backend implements the same
// interface. Methods state their contract in one line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/tensor.h"
#include "schemas/plan.pb.h"

namespace piper::engine {

// What a kernel may depend on besides its tensors.
struct StepContext {
  int64_t step = 1;   // 1-based optimizer step number (bias correction, momentum start)
  uint64_t seed = 0;  // the run's seed
};

// A kernel resolved once at load time against fixed tensors.
class PreparedKernel {
 public:
  virtual ~PreparedKernel() = default;
  // Executes the kernel on the tensors it was prepared with; throws piper::Error on bad data
  // (e.g. a label out of range).
  virtual void run(const StepContext& context) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Short identifier used by --device ("cpu").
  virtual std::string name() const = 0;

  // Returns `bytes` of device memory, zero-filled and 64-byte aligned (never null, even for
  // 0 bytes); throws piper::Error naming the size when memory is exhausted.
  virtual void* allocate(size_t bytes) = 0;
  // Frees memory returned by allocate(); null is a no-op.
  virtual void release(void* data) = 0;

  // Copies `bytes` from host memory to device memory; complete on return.
  virtual void upload(void* device_dst, const void* host_src, size_t bytes) = 0;
  // Copies `bytes` from device memory to host memory; complete on return.
  virtual void download(void* host_dst, const void* device_src, size_t bytes) = 0;

  // Resolves `kernel` (op type, attributes, dtypes, shapes) once for these tensors, in the
  // kernel's input and output order (views with null data for omitted optional ones).
  // Constant inputs (plan constants, parameters) already hold their values. Throws
  // piper::Error naming the op type and listing the supported ops when the op is unknown,
  // or naming the op and the offending input/attribute when the kernel is malformed.
  virtual std::unique_ptr<PreparedKernel> prepare(const plan::Kernel& kernel,
                                                  std::vector<TensorView> inputs,
                                                  std::vector<TensorView> outputs) = 0;
};

// The backend for --device NAME; throws piper::Error listing the available ones.
std::unique_ptr<Backend> make_backend(const std::string& name);

}  // namespace piper::engine
