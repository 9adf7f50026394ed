#include "engine/runtime/executor.h"

#include <sched.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#include "formats/error.h"

namespace piper::engine {
namespace {

// Makes the calling thread a batch thread: it keeps its share of the CPU, but its wakeups no
// longer preempt the thread running on its core. A background stream (gradient reductions)
// sleeps until a peer's data or a computing stream's event wakes it; as a normal thread it
// preempted that computing stream on a core the two share and ran the collective's copies and
// sums to the end before the computation went on, so that on a CPU with a core per rank the
// late rank's all-reduces ran beside its backward in name only (bench/ddp_overlap.py). Streams
// others wait for (expert exchanges, pipeline transfers) stay normal: as batch threads they
// hid less of DualPipe's exchanges (bench/dualpipe_overlap.py). Gloo's event thread is a batch
// thread for the same reason (gloo_communicator.cc).
void run_as_batch_thread() {
  const sched_param param{};
  ::sched_setscheduler(0, SCHED_BATCH, &param);  // if refused, the thread runs as before
}

// The system clock's reading, in microseconds since the epoch, at steady-clock time `when`: the
// clocks' offset is taken once per process from the closest of a few paired readings, so that a
// thread preempted between two readings does not shift the traces of this rank against others'.
double unix_microseconds(std::chrono::steady_clock::time_point when) {
  using std::chrono::duration;
  static const double offset_us = [] {
    double best_gap = 0, offset = 0;
    for (int sample = 0; sample < 16; ++sample) {
      const auto before = std::chrono::steady_clock::now();
      const auto system = std::chrono::system_clock::now();
      const auto after = std::chrono::steady_clock::now();
      const double gap = duration<double, std::micro>(after - before).count();
      if (sample == 0 || gap < best_gap) {
        best_gap = gap;
        const double steady_us =
            duration<double, std::micro>(before.time_since_epoch()).count() + gap / 2;
        offset = duration<double, std::micro>(system.time_since_epoch()).count() - steady_us;
      }
    }
    return offset;
  }();
  return std::chrono::duration<double, std::micro>(when.time_since_epoch()).count() + offset_us;
}

// Events of one step across stream threads; a failure wakes every waiter.
class StepEvents {
 public:
  StepEvents(int count, const std::function<void()>& on_failure)
      : recorded_(static_cast<size_t>(count), false), on_failure_(on_failure) {}

  void record(int event) {
    {
      std::lock_guard lock(mutex_);
      recorded_[event] = true;
    }
    changed_.notify_all();
  }
  // Returns false when the step failed elsewhere before the event was recorded.
  bool wait(int event) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return recorded_[event] || failure_ != nullptr; });
    return recorded_[event] && failure_ == nullptr;
  }
  void fail(std::exception_ptr failure) {
    bool first = false;
    {
      std::lock_guard lock(mutex_);
      if (failure_ == nullptr) {
        failure_ = std::move(failure);
        first = true;
      }
    }
    changed_.notify_all();
    if (first && on_failure_) on_failure_();
  }
  bool failed() {
    std::lock_guard lock(mutex_);
    return failure_ != nullptr;
  }
  std::exception_ptr failure() {
    std::lock_guard lock(mutex_);
    return failure_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<bool> recorded_;
  std::exception_ptr failure_;
  const std::function<void()>& on_failure_;
};

void run_kernel(const ExecInstruction& instruction, const StepContext& context) {
  try {
    instruction.kernel->run(context);
  } catch (const NonFiniteError& error) {
    throw NonFiniteError(instruction.where + ": " + error.what(), error.every_rank());
  } catch (const std::exception& error) {
    throw Error(instruction.where + ": " + error.what());
  }
}

// Where a traced step records its stream's times; null when tracing is off.
struct StreamClock {
  std::chrono::steady_clock::time_point step_start;
  std::vector<InstructionTime>* times = nullptr;

  double now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
  }
};

void run_instructions(const ExecStream& stream, size_t index, DeviceStreams* device,
                      const StepContext& context, StepEvents& events, const StreamClock& clock) {
  for (size_t i = 0; i < stream.instructions.size(); ++i) {
    const ExecInstruction& instruction = stream.instructions[i];
    switch (instruction.kind) {
      case ExecInstruction::Kind::kKernel:
        if (events.failed()) return;
        if (clock.times) {
          InstructionTime& time = (*clock.times)[i];
          time.start = clock.now();
          run_kernel(instruction, context);
          time.end = clock.now();
          time.ran = true;
        } else {
          run_kernel(instruction, context);
        }
        break;
      case ExecInstruction::Kind::kRecord:
        if (device) device->record(index, instruction.event);
        events.record(instruction.event);
        break;
      case ExecInstruction::Kind::kWait:
        if (!events.wait(instruction.event)) return;
        if (device) device->wait(index, instruction.event);
        break;
    }
  }
}

void run_stream(const ExecStream& stream, size_t index, DeviceStreams* device,
                const StepContext& context, StepEvents& events, const StreamClock& clock) {
  try {
    if (device) device->bind(index);
    run_instructions(stream, index, device, context, events, clock);
  } catch (...) {
    events.fail(std::current_exception());
  }
  // Also after a failure: the queue drains before the step's tensors are touched again.
  if (device) {
    try {
      device->finish(index);
    } catch (...) {
      events.fail(std::current_exception());
    }
  }
}

}  // namespace

Executor::Executor(std::vector<ExecStream> streams, int num_events,
                   std::function<void()> on_failure, std::unique_ptr<DeviceStreams> device)
    : streams_(std::move(streams)),
      num_events_(num_events),
      on_failure_(std::move(on_failure)),
      device_(std::move(device)) {
  check_events();
}

size_t Executor::num_kernels() const {
  size_t count = 0;
  for (const auto& stream : streams_) {
    for (const auto& instruction : stream.instructions) {
      count += instruction.kind == ExecInstruction::Kind::kKernel;
    }
  }
  return count;
}

void Executor::check_events() const {
  if (num_events_ < 0) {
    throw Error("the plan has a negative event count (" + std::to_string(num_events_) + ")");
  }
  std::vector<std::string> recorder(static_cast<size_t>(num_events_));
  for (const auto& stream : streams_) {
    for (const auto& instruction : stream.instructions) {
      if (instruction.kind == ExecInstruction::Kind::kKernel) continue;
      if (instruction.event < 0 || instruction.event >= num_events_) {
        throw Error(instruction.where + " uses event " + std::to_string(instruction.event) +
                    " but the plan has " + std::to_string(num_events_) + " events");
      }
      if (instruction.kind == ExecInstruction::Kind::kRecord) {
        if (!recorder[instruction.event].empty()) {
          throw Error(instruction.where + " records event " + std::to_string(instruction.event) +
                      ", already recorded by " + recorder[instruction.event] +
                      "; each event is recorded once per step");
        }
        recorder[instruction.event] = instruction.where;
      }
    }
  }
  // Simulate the step: advance any stream whose next instruction is not a wait on an unrecorded
  // event. Streams left unfinished wait forever.
  std::vector<size_t> next(streams_.size(), 0);
  std::vector<bool> recorded(static_cast<size_t>(num_events_), false);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t s = 0; s < streams_.size(); ++s) {
      const auto& instructions = streams_[s].instructions;
      while (next[s] < instructions.size()) {
        const ExecInstruction& instruction = instructions[next[s]];
        if (instruction.kind == ExecInstruction::Kind::kWait && !recorded[instruction.event]) {
          break;
        }
        if (instruction.kind == ExecInstruction::Kind::kRecord) {
          recorded[instruction.event] = true;
        }
        ++next[s];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (size_t s = 0; s < streams_.size(); ++s) {
    if (next[s] == streams_[s].instructions.size()) continue;
    const ExecInstruction& instruction = streams_[s].instructions[next[s]];
    const std::string& by = recorder[instruction.event];
    stuck += (stuck.empty() ? "" : "; ") + instruction.where + " waits for event " +
             std::to_string(instruction.event) +
             (by.empty() ? ", which no instruction records"
                         : ", recorded by " + by + ", which cannot run before it");
  }
  if (!stuck.empty()) {
    throw Error("the plan's streams deadlock: " + stuck + "; re-plan with a matching piper-plan");
  }
}

void Executor::run_step(const StepContext& context) {
  StepEvents events(num_events_, on_failure_);
  std::vector<StreamClock> clocks(streams_.size());
  if (tracing_) {
    trace_.streams.assign(streams_.size(), {});
    const auto step_start = std::chrono::steady_clock::now();
    trace_.start_unix_us = unix_microseconds(step_start);
    for (size_t s = 0; s < streams_.size(); ++s) {
      trace_.streams[s].resize(streams_[s].instructions.size());
      clocks[s] = {step_start, &trace_.streams[s]};
    }
  }
  if (streams_.size() == 1) {
    run_stream(streams_[0], 0, device_.get(), context, events, clocks[0]);
  } else {
    std::vector<std::thread> threads;
    threads.reserve(streams_.size());
    try {
      for (size_t s = 0; s < streams_.size(); ++s) {
        threads.emplace_back([this, s, &context, &events, &clocks] {
          if (streams_[s].background) run_as_batch_thread();
          run_stream(streams_[s], s, device_.get(), context, events, clocks[s]);
        });
      }
    } catch (const std::system_error& error) {
      events.fail(std::make_exception_ptr(
          Error(std::string("cannot start a thread per stream: ") + error.what())));
    }
    for (auto& thread : threads) thread.join();
  }
  if (std::exception_ptr failure = events.failure()) {
    std::rethrow_exception(failure);
  }
}

}  // namespace piper::engine
