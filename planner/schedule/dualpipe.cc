// DualPipe's per-device orders: DualPipe.step (deepseek-ai/DualPipe, dualpipe/dualpipe.py at
// commit bb214e82) replayed call by call for each rank, recording which pass of which
// microbatch each compute call runs instead of running it.
#include <deque>

#include "formats/error.h"
#include "planner/schedule/pipeline_schedule.h"

namespace piper::planner::schedule {
namespace {

[[noreturn]] void fail(std::string_view path, std::string_view field, const std::string& what) {
  throw Error(std::string(path) + "." + std::string(field) + ": " + what);
}

void check_shape(const PipelineShape& shape, std::string_view path) {
  if (shape.devices < 2 || shape.devices % 2 != 0) {
    fail(path, "devices",
         "schedule \"dualpipe\" needs an even number of devices (at least 2), got " +
             std::to_string(shape.devices));
  }
  const int64_t least = 2 * shape.devices;
  if (shape.microbatches < least || shape.microbatches % 2 != 0) {
    fail(path, "num_microbatches",
         "schedule \"dualpipe\" needs an even number of microbatches, at least twice the " +
             std::to_string(shape.devices) + " devices (" + std::to_string(least) +
             "; half of them enter at each end), got " + std::to_string(shape.microbatches));
  }
  if (shape.chunks != 1) {
    fail(path, "chunks",
         "schedule \"dualpipe\" holds two stages per device by itself (one per direction); "
         "leave \"chunks\" at 1, got " +
             std::to_string(shape.chunks));
  }
}

// One rank's DualPipe.step. A "phase" is DualPipe's: phase 0 is the direction whose
// microbatches reach this rank first from its own end of the pipeline (direction 0 on the
// first half of the ranks, direction 1 on the second half), phase 1 the other.
class DualPipeRank {
 public:
  DualPipeRank(int64_t devices, int64_t rank)
      : devices_(devices), rank_(rank), second_half_(rank >= devices / 2) {}

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
  // Microbatch k of a direction is the k-th one through it, counted per pass.
  Slot next(int phase, ir::Pass pass, int64_t (&count)[2]) {
    const int64_t direction = phase ^ static_cast<int>(second_half_);
    const int64_t stage = direction == 0 ? rank_ : devices_ - 1 - rank_;
    return {.stage = stage, .microbatch = count[direction]++, .pass = pass, .direction = direction};
  }

  const int64_t devices_;
  const int64_t rank_;
  const bool second_half_;
  int64_t forwards_[2] = {0, 0};
  int64_t backwards_[2] = {0, 0};
  std::deque<Slot> deferred_;
  DeviceOrder order_;
};

template <typename Body>
void repeat(int64_t times, Body body) {
  for (int64_t i = 0; i < times; ++i) body(i);
}

DeviceOrder dualpipe_rank(const PipelineShape& shape, int64_t rank) {
  const int64_t half = shape.devices / 2;
  const int64_t half_rank = std::min(rank, shape.devices - 1 - rank);
  const int64_t chunks = shape.microbatches / 2;  // per direction
  const bool middle = half_rank == half - 1;
  const int64_t outer = half - half_rank - 1;  // ranks between this one and its end
  DualPipeRank r(shape.devices, rank);
  // 1: nF0, the warm-up forwards of the own direction.
  repeat(2 * outer, [&](int64_t) { r.forward(0); });
  // 2: nF0F1.
  repeat(half_rank + 1, [&](int64_t) {
    r.forward(0);
    r.forward(1);
  });
  // 3: nB1W1F1, zero bubble.
  repeat(outer, [&](int64_t) {
    r.backward(1, true);
    r.weight();
    r.forward(1);
  });
  // 4: nF0B1F1B0, the main phase of overlapped pairs; the middle ranks do not overlap their
  // first pair, which shortens the bubble.
  repeat(chunks - shape.devices + half_rank + 1, [&](int64_t i) {
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
  repeat(half_rank + 1, [&](int64_t i) {
    const bool turn = i == (half_rank + 1) / 2;
    if (turn && half_rank % 2 == 1) zero_bubble = true;
    r.backward(1, zero_bubble);
    if (turn && half_rank % 2 == 0) zero_bubble = true;
    r.backward(0, zero_bubble);
  });
  // 7: nWB0, zero bubble.
  repeat(outer, [&](int64_t) {
    r.weight();
    r.backward(0, true);
  });
  // 8: nW, the weight passes still deferred.
  repeat(half_rank + 1, [&](int64_t) { r.weight(); });
  return r.finish();
}

}  // namespace

PipelineOrder dualpipe(const PipelineShape& shape, std::string_view path) {
  check_shape(shape, path);
  PipelineOrder orders;
  for (int64_t rank = 0; rank < shape.devices; ++rank) {
    orders.push_back(dualpipe_rank(shape, rank));
  }
  return orders;
}

}  // namespace piper::planner::schedule
