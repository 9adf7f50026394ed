// The compute backend interface: memory and kernels for one device. The CPU
// backend (engine/cpu) is the reference; a CUDA backend implements the same
// interface. Methods state their contract in one line.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/tensor.h"
#include "schemas/plan.pb.h"

namespace piper::engine {

class CommunicatorFactory;
class Store;

// What a kernel may depend on besides its tensors.
struct StepContext {
  int64_t step = 1;   // 1-based training step: what seeded kernels (dropout) key on
  uint64_t seed = 0;  // the run's seed
  // 1-based optimizer step number (bias correction, momentum start): the updates applied
  // before this step, plus one. Behind `step` once a step's update was skipped.
  int64_t update = 1;
};

// How a backend whose kernels run asynchronously on a device (CUDA) orders a plan's streams
// there: each plan stream gets a device queue and each plan event a device event. The executor
// calls these from the thread that runs plan stream `stream`, beside its host-side events.
class DeviceStreams {
 public:
  virtual ~DeviceStreams() = default;
  // Binds the calling thread to `stream`: the kernels it runs next go to that stream's queue.
  virtual void bind(size_t stream) = 0;
  // Marks `event` in `stream`'s queue after the work issued there so far.
  virtual void record(size_t stream, int event) = 0;
  // Makes the work `stream` issues next wait for `event`, which record() has marked.
  virtual void wait(size_t stream, int event) = 0;
  // Blocks until `stream`'s work is done and unbinds the thread; throws piper::Error naming the
  // device fault when the work failed.
  virtual void finish(size_t stream) = 0;
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
  // Copies `bytes` within device memory (the ranges may overlap), after the work the calling
  // thread's stream issued before, like a kernel. Default: memmove, for host memory.
  virtual void copy(void* device_dst, const void* device_src, size_t bytes);
  // Whether device memory is host memory, which host code (and Gloo) may use directly.
  virtual bool host_memory() const { return true; }
  // Bytes of memory the device has (free or not). Default: the host's physical memory.
  virtual size_t memory_capacity() const;
  // The device queues and events of a plan's `streams` and `events`, or null (the default) when
  // kernels are complete when run() returns.
  virtual std::unique_ptr<DeviceStreams> make_device_streams(size_t streams, int events);

  // Resolves `kernel` (op type, attributes, dtypes, shapes) once for these tensors, in the
  // kernel's input and output order (views with null data for omitted optional ones).
  // Constant inputs (plan constants, parameters) already hold their values. Throws
  // piper::Error naming the op type and listing the supported ops when the op is unknown,
  // or naming the op and the offending input/attribute when the kernel is malformed.
  virtual std::unique_ptr<PreparedKernel> prepare(const plan::Kernel& kernel,
                                                  std::vector<TensorView> inputs,
                                                  std::vector<TensorView> outputs) = 0;
};

// The backend for --device NAME; throws piper::Error listing the available ones, or in one line
// suggesting --device cpu when cuda is asked for where it cannot run.
std::unique_ptr<Backend> make_backend(const std::string& name);

// The default --comm of a device: "gloo" for cpu, "nccl" for cuda.
std::string default_communicator(const std::string& device);

// NCCL communicators (--comm nccl) for `backend`, which must be the cuda one, meeting through
// `store` as global `rank`, under store keys that start with `key_prefix`; a group's channel
// waits up to `timeout` for its members. Throws piper::Error when the build has no CUDA or
// `backend` is another one.
std::unique_ptr<CommunicatorFactory> make_nccl_communicators(Backend& backend, Store& store,
                                                             int rank,
                                                             const std::string& key_prefix,
                                                             std::chrono::milliseconds timeout);

}  // namespace piper::engine
