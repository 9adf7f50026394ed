// DualPipe's and DualPipeV's per-device orders: DualPipe.step and DualPipeV.step
// (deepseek-ai/DualPipe, dualpipe/dualpipe.py at commit bb214e82 and dualpipe/dualpipev.py)
// replayed call by call for each rank, recording which pass of which microbatch each compute
// call runs instead of running it.
#include <deque>

#include "formats/error.h"
#include "planner/schedule/pipeline_schedule.h"

namespace piper::planner::schedule {
namespace {

[[noreturn]] void fail(std::string_view path, std::string_view field, const std::string& what) {
  throw Error(std::string(path) + "." + std::string(field) + ": " + what);
}

// DualPipe needs an even number of devices and microbatches, twice as many microbatches as
// devices; DualPipeV as many microbatches as its stages.
void check_shape(const PipelineShape& shape, std::string_view schedule, std::string_view path) {
  const bool v = schedule == "dualpipev";
  if (shape.devices < (v ? 1 : 2) || (!v && shape.devices % 2 != 0)) {
    fail(
        path, "devices",
        v ? "schedule \"dualpipev\" needs at least one device, got " + std::to_string(shape.devices)
          : "schedule \"dualpipe\" needs an even number of devices (at least 2), got " +
                std::to_string(shape.devices));
  }
  const int64_t least = 2 * shape.devices;
  if (shape.microbatches < least || (!v && shape.microbatches % 2 != 0)) {
    fail(path, "num_microbatches",
         v ? "schedule \"dualpipev\" needs at least as many microbatches as its " +
                 std::to_string(least) + " stages (2 per device), got " +
                 std::to_string(shape.microbatches)
           : "schedule \"dualpipe\" needs an even number of microbatches, at least twice the " +
                 std::to_string(shape.devices) + " devices (" + std::to_string(least) +
                 "; half of them enter at each end), got " + std::to_string(shape.microbatches));
  }
  if (shape.chunks != 1 && !(v && shape.chunks == 2)) {
    fail(path, "chunks",
         "schedule \"" + std::string(schedule) +
             "\" holds two stages per device by itself; leave \"chunks\" out, got " +
             std::to_string(shape.chunks));
  }
}

// Where a rank's phase runs: the stage and DualPipe's direction.
struct Phase {
  int64_t stage = 0;
  int64_t direction = 0;
};

// One rank's DualPipe.step or DualPipeV.step, as the compute calls of its phases 0 and 1.
class DualPipeRank {
 public:
  explicit DualPipeRank(const Phase (&phases)[2]) : phases_{phases[0], phases[1]} {}

  // _forward_chunk(phase): the phase's next forward.
  void forward(int phase) { order_.push_back(next(phase, ir::Pass::kForward, forwards_)); }

  // _backward_chunk(phase, enable_zb): the phase's next backward; with zero bubble its weight
  // gradients wait in WeightGradStore's queue for a later weight().
  void backward(int phase, bool zero_bubble) {
    if (!zero_bubble) {
      order_.push_back(next(phase, ir::Pass::kBackward, backwards_));
      return;
    }
    order_.push_back(next(phase, ir::Pass::kBackwardInput, backwards_));
    Slot weight = order_.back();
    weight.pass = ir::Pass::kBackwardWeight;
    deferred_.push_back(weight);
  }

  // _forward_backward_chunk(forward_phase, backward_phase): the two overlapped; the backward
  // is whole (DualPipe enables no zero bubble inside a pair).
  void forward_backward(int forward_phase, int backward_phase) {
    forward(forward_phase);
    backward(backward_phase, false);
    order_.back().with_previous = true;
  }

  // _weight_chunk(): the oldest deferred weight gradients.
  void weight() {
    if (deferred_.empty()) throw std::logic_error("dualpipe: a weight pass with none deferred");
    order_.push_back(deferred_.front());
    deferred_.pop_front();
  }

  DeviceOrder finish() {
    if (!deferred_.empty()) throw std::logic_error("dualpipe: weight passes left deferred");
    return std::move(order_);
  }

 private:
  // Microbatch k of a phase is the k-th one through it, counted per pass.
  Slot next(int phase, ir::Pass pass, int64_t (&count)[2]) {
    const Phase& at = phases_[phase];
    return {
        .stage = at.stage, .microbatch = count[phase]++, .pass = pass, .direction = at.direction};
  }

  const Phase phases_[2];
  int64_t forwards_[2] = {0, 0};
  int64_t backwards_[2] = {0, 0};
  std::deque<Slot> deferred_;
  DeviceOrder order_;
};

template <typename Body>
void repeat(int64_t times, Body body) {
  for (int64_t i = 0; i < times; ++i) body(i);
}

// The eight phases both steps share. DualPipe runs them with n = p/2 ranks per half, k the
// rank's place from its end of the pipeline and m/2 microbatches per direction; DualPipeV
// with n = its devices, k = the rank and m microbatches.
DeviceOrder eight_phases(DualPipeRank& r, int64_t n, int64_t k, int64_t chunks) {
  const bool middle = k == n - 1;  // DualPipe's middle ranks, DualPipeV's last
  const int64_t outer = n - k - 1;
  // 1: nF0, the warm-up forwards of phase 0.
  repeat(2 * outer, [&](int64_t) { r.forward(0); });
  // 2: nF0F1.
  repeat(k + 1, [&](int64_t) {
    r.forward(0);
    r.forward(1);
  });
  // 3: nB1W1F1, zero bubble.
  repeat(outer, [&](int64_t) {
    r.backward(1, true);
    r.weight();
    r.forward(1);
  });
  // 4: nF0B1F1B0, the main phase of overlapped pairs; the middle does not overlap its first
  // pair, which shortens the bubble.
  repeat(chunks - 2 * n + k + 1, [&](int64_t i) {
    if (i == 0 && middle) {
      r.forward(0);
      r.backward(1, false);
    } else {
      r.forward_backward(0, 1);
    }
    r.forward_backward(1, 0);
  });
  // 5: nB1F1B0.
  repeat(outer, [&](int64_t) {
    r.backward(1, false);
    r.forward_backward(1, 0);
  });
  // 6: nB1B0, the second half of them with zero bubble.
  bool zero_bubble = false;
  repeat(k + 1, [&](int64_t i) {
    const bool turn = i == (k + 1) / 2;
    if (turn && k % 2 == 1) zero_bubble = true;
    r.backward(1, zero_bubble);
    if (turn && k % 2 == 0) zero_bubble = true;
    r.backward(0, zero_bubble);
  });
  // 7: nWB0, zero bubble.
  repeat(outer, [&](int64_t) {
    r.weight();
    r.backward(0, true);
  });
  // 8: nW, the weight passes still deferred.
  repeat(k + 1, [&](int64_t) { r.weight(); });
  return r.finish();
}

}  // namespace

PipelineOrder dualpipe(const PipelineShape& shape, std::string_view path) {
  check_shape(shape, "dualpipe", path);
  const int64_t p = shape.devices;
  PipelineOrder orders;
  for (int64_t rank = 0; rank < p; ++rank) {
    // Phase 0 is the direction that enters at this rank's end: 0 on the first half, 1 on the
    // second (DualPipe's `phase ^= is_in_second_half`).
    const int64_t own = rank < p / 2 ? 0 : 1;
    const auto stage = [&](int64_t direction) { return direction == 0 ? rank : p - 1 - rank; };
    const Phase phases[2] = {{stage(own), own}, {stage(1 - own), 1 - own}};
    DualPipeRank r(phases);
    orders.push_back(eight_phases(r, p / 2, std::min(rank, p - 1 - rank), shape.microbatches / 2));
  }
  return orders;
}

PipelineOrder dualpipev(const PipelineShape& shape, std::string_view path) {
  check_shape(shape, "dualpipev", path);
  const int64_t d = shape.devices;
  PipelineOrder orders;
  for (int64_t rank = 0; rank < d; ++rank) {
    const Phase phases[2] = {{.stage = rank}, {.stage = 2 * d - 1 - rank}};
    DualPipeRank r(phases);
    orders.push_back(eight_phases(r, d, rank, shape.microbatches));
  }
  return orders;
}

}  // namespace piper::planner::schedule
