// Chrome/Perfetto traces of steps run (piper-run --trace, --trace-steps): one
// process per rank, one thread per stream, one complete event per task (the
// consecutive instructions of one plan task on a stream) with its kernels
// nested inside, so a measured step reads like the planned one (piper-dump
// --schedule), and a flow arrow's end at each send and recv.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/runtime/executor.h"
#include "schemas/plan.pb.h"

namespace piper::engine {

// One traced step: its 1-based number and its times (Executor::last_trace).
struct TracedStep {
  int64_t step = 0;
  StepTrace trace;
};

// The trace of `steps` of `plan` (each trace's streams match plan.streams()):
// {"traceEvents": [...], ...} with pid = rank, tid = stream index named by
// thread_name metadata, ts and dur in microseconds from the first step's start
// (later steps where the system clock puts them; otherData.origin_unix_us is
// that start on the system clock, what piper-launch --trace aligns ranks by).
// Task events are named like "F mb3" (pass and microbatch) or, for transfers
// and collectives, by the instruction's label ("all_reduce fc1.weight
// (+more)"), with args step, task, pass, microbatch and kernels; their kernels
// are events of category "kernel" named by op type. A send writes a flow start
// (ph "s") at its start and a recv a flow end (ph "f") near its end, both of
// category "transfer" under the id transfer_flow_id gives, so that the ranks'
// files merged draw an arrow per transfer. `device` is the backend's name (its
// times are host times: issue times on a device). otherData.step is the last
// step, otherData.steps all of them.
nlohmann::json chrome_trace(const plan::Plan& plan, const std::vector<TracedStep>& steps,
                            const std::string& device);
// One step, numbered `step`.
nlohmann::json chrome_trace(const plan::Plan& plan, const StepTrace& trace, int64_t step,
                            const std::string& device);

// The flow id of the transfer rank `sender` sends to `receiver` under `tag` in `step`, the same
// on both ranks and distinct between transfers (below 2^53, exact in JSON).
uint64_t transfer_flow_id(int64_t step, int sender, int receiver, int tag);

// The steps of "5,10-12" (1-based, each at least 1), ascending without repeats. Throws
// piper::Error quoting the part that is not a step or an ascending range.
std::vector<int64_t> parse_step_list(const std::string& text);

}  // namespace piper::engine
