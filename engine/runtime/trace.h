// Chrome/Perfetto traces of a step run (piper-run --trace): one process per
// rank, one thread per stream, one complete event per task (the consecutive
// instructions of one plan task on a stream) with its kernels nested inside,
// so the measured step reads like the planned one (piper-dump --schedule).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "engine/runtime/executor.h"
#include "schemas/plan.pb.h"

namespace piper::engine {

// The trace of one step of `plan` timed by `trace` (Executor::last_trace,
// whose streams match plan.streams()): {"traceEvents": [...], ...} with
// pid = rank, tid = stream index named by thread_name metadata, ts and dur in
// microseconds from the step's start. Task events are named like "F mb3"
// (pass and microbatch) or, for transfers and collectives, by the
// instruction's label ("all_reduce fc1.weight (+more)"), with args task,
// pass, microbatch and kernels; their kernels are events of category
// "kernel" named by op type. `step` is the 1-based step it timed; `device`
// the backend's name (its times are host times: issue times on a device).
nlohmann::json chrome_trace(const plan::Plan& plan, const StepTrace& trace, int64_t step,
                            const std::string& device);

}  // namespace piper::engine
