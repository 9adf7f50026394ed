// Pipeline schedules: for p devices, m microbatches and v model chunks per
// device, the order in which each device runs its forward and backward passes.
// Pure functions of the shape; the `pipeline` generator turns their result
// into `order` directives and planner/sim/schedule_replay.h measures it.
//
// Stages follow Megatron-LM's interleaved layout: chunk c of device d is
// stage c·p + d, so with one chunk stage d lives on device d.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "planner/ir/types.h"

namespace piper::planner::schedule {

struct PipelineShape {
  int64_t devices = 1;       // p: pipeline stages per chunk, one device each
  int64_t microbatches = 1;  // m
  int64_t chunks = 1;        // v: stages per device (interleaved only)
};

// One pass of one microbatch on one stage. `pass` is kForward, kBackward
// (input and weight gradients together), kBackwardInput or kBackwardWeight.
struct Slot {
  int64_t stage = 0;
  int64_t microbatch = 0;
  ir::Pass pass = ir::Pass::kForward;
  // DualPipe's two pipelines: 0 for the microbatches that enter at the first device, 1 for
  // those that enter at the last one (microbatch k of either is its k-th). The other
  // schedules have one.
  int64_t direction = 0;
  // Runs together with the slot before it: one `order` group, which may overlap
  // (DualPipe's forward of one microbatch beside the backward of another).
  bool with_previous = false;
  bool operator==(const Slot&) const = default;
};

using DeviceOrder = std::vector<Slot>;
// Indexed by device: each device runs its slots one after another.
using PipelineOrder = std::vector<DeviceOrder>;

// The stage of chunk `chunk` on `device` (Megatron's interleaved layout).
inline int64_t stage_of(const PipelineShape& shape, int64_t device, int64_t chunk) {
  return chunk * shape.devices + device;
}

// "F3 of stage 1", "BW0 of stage 4", for messages.
std::string to_string(const Slot& slot);

// The generators. `path` names the directive in errors ("s.json:
// $.directives[2]"); a shape the schedule cannot take throws piper::Error
// naming the field: "s.json: $.directives[2].num_microbatches: ...".

// GPipe (Huang et al. 2019): every forward, then every backward, each in
// microbatch order. Any m >= 1; v = 1.
PipelineOrder gpipe(const PipelineShape& shape, std::string_view path);

// 1F1B as in PipeDream-flush (Narayanan et al. 2021) and Megatron-LM: device
// d runs min(p-1-d, m) warm-up forwards, then alternates one forward and one
// backward, then drains the remaining backwards. Any m >= 1; v = 1.
PipelineOrder one_f_one_b(const PipelineShape& shape, std::string_view path);

// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's
// forward_backward_pipelining_with_interleaving): v >= 2 chunks per device
// and m divisible by p. Forwards walk the chunks in rounds of p microbatches,
// backwards walk them in reverse; device d warms up with 2(p-1-d) + (v-1)p
// forwards (all of them when m = p), then alternates as 1F1B.
PipelineOrder interleaved(const PipelineShape& shape, std::string_view path);

// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", the handcrafted
// schedule with 1F1B's peak memory): backward split into BI and BW. Device d
// warms up as 1F1B, then runs F, BI and, from its (d+1)-th steady step on,
// the oldest pending BW; the BWs it held back run after its last BI, filling
// the tail that 1F1B leaves idle. Any m >= 1; v = 1.
PipelineOrder zb_h1(const PipelineShape& shape, std::string_view path);

// DualPipe (DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024; deepseek-ai/DualPipe's
// DualPipe.step at commit bb214e82): p devices (p even), m microbatches in all (even,
// m >= 2p), half entering at each end. Device d holds stage d of direction 0 and stage
// p-1-d of direction 1; its order is DualPipe.step's eight phases for its rank, each
// microbatch numbered within its direction (0 .. m/2-1). Backwards that DualPipe runs with
// zero bubble (WeightGradStore) are a BI here and a BW where DualPipe pops the weight
// gradients, oldest first; the others are whole B. Overlapped forward-backward chunks are
// a pair of slots, the second `with_previous`. v = 1.
PipelineOrder dualpipe(const PipelineShape& shape, std::string_view path);

// DualPipeV (Sea AI Lab's "cut-in-half" DualPipe; deepseek-ai/DualPipe's DualPipeV.step):
// 2p stages on p devices in a V, device d holding stage d (phase 0) and stage 2p-1-d
// (phase 1), every microbatch entering at device 0 and ending there; m >= 2p. The order is
// the same eight phases as DualPipe's with the rank for its place and m microbatches.
// `chunks` is implied (1 or 2 accepted).
PipelineOrder dualpipev(const PipelineShape& shape, std::string_view path);

// The generator named by a `pipeline` directive's "schedule" ("gpipe", "1f1b",
// "interleaved", "zb-h1", "dualpipe", "dualpipev").
PipelineOrder pipeline_order(std::string_view schedule, const PipelineShape& shape,
                             std::string_view path);

}  // namespace piper::planner::schedule
