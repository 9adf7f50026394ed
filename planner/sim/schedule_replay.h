// Replays a pipeline order in time: each device runs its slots one after
// another, each slot as soon as its device is free and its inputs exist.
// The seed of issue 5's cost model; on the task DAG the slot becomes a task
// and the durations come from per-task estimates.
//
// Dependencies (stage s, microbatch mb, both of one direction: DualPipe's two
// pipelines are independent; S stages = one more than the largest stage named):
//   F  needs F of stage s-1 (none on stage 0);
//   B, BI need B or BI of stage s+1 (on the last stage, F of s instead) and F
//   of stage s;
//   BW needs BI of stage s.
// A dependency run by another device arrives `transfer` later.
#pragma once

#include <cstddef>
#include <vector>

#include "formats/error.h"
#include "planner/schedule/pipeline_schedule.h"

namespace piper::planner::sim {

// Time units are the caller's; the defaults are the textbook ones where a
// backward costs two forwards, split evenly into BI and BW.
struct PassDurations {
  double forward = 1;
  double backward = 2;
  double backward_input = 1;
  double backward_weight = 1;
  double transfer = 0;  // added to every dependency that crosses devices
  double of(ir::Pass pass) const;
};

struct DeviceReplay {
  std::vector<double> starts;  // per slot of the device's order
  double busy = 0;             // sum of its slots' durations
  double idle = 0;             // makespan - busy: the bubble, start and tail included
  // Most (stage, microbatch) activations held at once. An activation is live
  // from its F until its B, or with split backward until its BW: BW reads
  // the stage input as BI does, so BI alone frees nothing. Depends only on
  // the order, not on durations.
  int64_t peak_live_activations = 0;
};

struct ReplayResult {
  std::vector<DeviceReplay> devices;
  double makespan = 0;  // when the last slot anywhere ends
  // Idle over makespan, summed over devices: (p-1)/(m+p-1) for 1F1B.
  double bubble_fraction() const;
};

// Thrown when some device's next slot can never run: its dependency is in no
// device's order, or runs after slots that wait on this device.
class DeadlockError : public Error {
 public:
  DeadlockError(int64_t stuck_device, size_t stuck_slot, const std::string& what)
      : Error(what), device(stuck_device), slot(stuck_slot) {}
  int64_t device;  // the lowest-numbered device that is stuck
  size_t slot;     // index of its stuck slot in its order
};

// Throws DeadlockError as above, and piper::Error for a slot that is not F,
// B, BI or BW, has a negative stage or microbatch, or appears twice.
ReplayResult replay(const schedule::PipelineOrder& order, const PassDurations& durations = {});

}  // namespace piper::planner::sim
