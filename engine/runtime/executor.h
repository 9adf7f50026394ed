// Runs a rank's instruction streams for one step: kernels in stream order, with
// record/wait events ordering work across streams. Several streams run on one
// thread each; a single stream runs inline on the caller's thread. With a device
// backend's DeviceStreams, each thread issues its stream's kernels to a device
// queue and events order the queues too; a step ends when every queue is done.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/backend.h"

namespace piper::engine {

struct ExecInstruction {
  enum class Kind { kKernel, kRecord, kWait };
  Kind kind = Kind::kKernel;
  std::unique_ptr<PreparedKernel> kernel;  // for kKernel
  int event = -1;                          // for kRecord and kWait
  std::string where;  // "stream 'main' instruction 3 (Gemm '/fc1/Gemm')", for errors
};

struct ExecStream {
  std::string name;
  std::vector<ExecInstruction> instructions;
  // The plan's Stream.background: the stream's thread runs as a batch thread (run_step).
  bool background = false;
};

// Host times of one step's instructions, recorded only while tracing is on.
struct InstructionTime {
  // Seconds from the start of the step. For a device backend these are when the
  // kernel was issued to its queue and when issuing returned, not when it ran.
  double start = 0;
  double end = 0;
  bool ran = false;  // false for events and for kernels a failure skipped
};

struct StepTrace {
  // Per stream, per instruction, in the order of the streams given to the Executor.
  std::vector<std::vector<InstructionTime>> streams;
  // The system clock when the step started, in microseconds since the epoch: what lines up
  // steps of one rank, and the ranks of a job (piper-launch --trace).
  double start_unix_us = 0;
};

class Executor {
 public:
  // Checks the events: each in [0, num_events), recorded at most once per step, every waited
  // event recorded, and the streams free of deadlock. Throws piper::Error naming the stream,
  // instruction and event otherwise. `on_failure`, when given, is called once per failed step,
  // from the failing thread, to interrupt kernels blocked on other streams (communication).
  // `device`, when given, holds the device queues of `streams` (Backend::make_device_streams).
  Executor(std::vector<ExecStream> streams, int num_events, std::function<void()> on_failure = {},
           std::unique_ptr<DeviceStreams> device = nullptr);

  // Runs every stream once. A kernel's failure stops all streams and is rethrown, prefixed
  // with the failing instruction's `where`.
  void run_step(const StepContext& context);

  size_t num_streams() const { return streams_.size(); }
  size_t num_kernels() const;

  // While on, run_step records each kernel's host start and end time on its stream's thread;
  // off (the default), it reads no clock.
  void set_tracing(bool on) { tracing_ = on; }
  // The times of the last step run with tracing on; empty before one.
  const StepTrace& last_trace() const { return trace_; }

 private:
  void check_events() const;

  std::vector<ExecStream> streams_;
  int num_events_;
  std::function<void()> on_failure_;
  std::unique_ptr<DeviceStreams> device_;
  bool tracing_ = false;
  StepTrace trace_;
};

}  // namespace piper::engine
