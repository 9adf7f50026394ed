#include "planner/schedule/pipeline_schedule.h"

#include <algorithm>

#include "formats/error.h"

namespace piper::planner::schedule {
namespace {

[[noreturn]] void fail(std::string_view path, std::string_view field, const std::string& what) {
  throw Error(std::string(path) + "." + std::string(field) + ": " + what);
}

// What every schedule needs; `schedule` is the name errors quote.
void check_common(const PipelineShape& shape, std::string_view schedule, std::string_view path) {
  if (shape.devices < 1) {
    fail(path, "devices",
         "a pipeline needs at least one device, got " + std::to_string(shape.devices));
  }
  if (shape.microbatches < 1) {
    fail(path, "num_microbatches",
         "a pipeline needs at least one microbatch, got " + std::to_string(shape.microbatches));
  }
  if (schedule != "interleaved" && shape.chunks != 1) {
    fail(path, "chunks",
         "schedule \"" + std::string(schedule) + "\" runs one chunk per device, got " +
             std::to_string(shape.chunks) + "; more chunks need schedule \"interleaved\"");
  }
}

Slot forward(int64_t stage, int64_t microbatch) {
  return {.stage = stage, .microbatch = microbatch, .pass = ir::Pass::kForward};
}

// `warmup` forwards, then one forward and one backward at a time, then the
// remaining backwards: the shape 1F1B, interleaved 1F1B and ZB-H1 share.
// forward_at(k) is the k-th forward slot; add_backward(k, order) appends what
// the k-th backward step runs.
template <typename ForwardAt, typename AddBackward>
DeviceOrder warmup_then_alternate(int64_t warmup, int64_t total, ForwardAt forward_at,
                                  AddBackward add_backward) {
  DeviceOrder order;
  for (int64_t k = 0; k < warmup; ++k) order.push_back(forward_at(k));
  for (int64_t k = 0; k < total; ++k) {
    if (warmup + k < total) order.push_back(forward_at(warmup + k));
    add_backward(k, order);
  }
  return order;
}

}  // namespace

std::string to_string(const Slot& slot) {
  return ir::to_string(slot.pass) + std::to_string(slot.microbatch) + " of stage " +
         std::to_string(slot.stage) + (slot.direction == 1 ? " (direction 1)" : "");
}

PipelineOrder gpipe(const PipelineShape& shape, std::string_view path) {
  check_common(shape, "gpipe", path);
  PipelineOrder orders(static_cast<size_t>(shape.devices));
  for (int64_t device = 0; device < shape.devices; ++device) {
    DeviceOrder& order = orders[static_cast<size_t>(device)];
    for (int64_t mb = 0; mb < shape.microbatches; ++mb) order.push_back(forward(device, mb));
    for (int64_t mb = 0; mb < shape.microbatches; ++mb) {
      order.push_back({.stage = device, .microbatch = mb, .pass = ir::Pass::kBackward});
    }
  }
  return orders;
}

PipelineOrder one_f_one_b(const PipelineShape& shape, std::string_view path) {
  check_common(shape, "1f1b", path);
  PipelineOrder orders;
  for (int64_t device = 0; device < shape.devices; ++device) {
    orders.push_back(warmup_then_alternate(
        std::min(shape.devices - 1 - device, shape.microbatches), shape.microbatches,
        [&](int64_t k) { return forward(device, k); },
        [&](int64_t k, DeviceOrder& order) {
          order.push_back({.stage = device, .microbatch = k, .pass = ir::Pass::kBackward});
        }));
  }
  return orders;
}

PipelineOrder interleaved(const PipelineShape& shape, std::string_view path) {
  check_common(shape, "interleaved", path);
  const int64_t p = shape.devices;
  const int64_t v = shape.chunks;
  const int64_t m = shape.microbatches;
  if (v < 2) {
    fail(path, "chunks",
         "schedule \"interleaved\" needs at least 2 chunks per device, got " + std::to_string(v) +
             "; with one chunk use \"1f1b\"");
  }
  if (m % p != 0) {
    fail(path, "num_microbatches",
         "schedule \"interleaved\" needs a multiple of the " + std::to_string(p) +
             " pipeline devices, got " + std::to_string(m));
  }
  // Megatron's k-th step of a device: microbatches go in rounds of p, each
  // round through every chunk (forwards first to last, backwards last to
  // first) before the next round starts.
  const auto microbatch_of = [&](int64_t k) { return k / (p * v) * p + k % p; };
  const auto chunk_of = [&](int64_t k) { return k % (p * v) / p; };
  const int64_t total = m * v;
  PipelineOrder orders;
  for (int64_t device = 0; device < p; ++device) {
    // With m = p Megatron runs every forward first: there is no steady phase.
    const int64_t warmup = m == p ? total : std::min(2 * (p - 1 - device) + (v - 1) * p, total);
    orders.push_back(warmup_then_alternate(
        warmup, total,
        [&](int64_t k) { return forward(stage_of(shape, device, chunk_of(k)), microbatch_of(k)); },
        [&](int64_t k, DeviceOrder& order) {
          order.push_back({.stage = stage_of(shape, device, v - 1 - chunk_of(k)),
                           .microbatch = microbatch_of(k),
                           .pass = ir::Pass::kBackward});
        }));
  }
  return orders;
}

PipelineOrder zb_h1(const PipelineShape& shape, std::string_view path) {
  check_common(shape, "zb-h1", path);
  const int64_t m = shape.microbatches;
  PipelineOrder orders;
  for (int64_t device = 0; device < shape.devices; ++device) {
    // Device d holds back its first d weight gradients: with them deferred
    // its input gradients reach device d-1 sooner, and the held-back ones
    // fill the tail. Activations stay live until BW, so device d peaks at
    // (p-1-d) + 1 + d = p live microbatches, 1F1B's peak on device 0.
    const int64_t deferred = device;
    const auto weight = [&](int64_t mb) {
      return Slot{.stage = device, .microbatch = mb, .pass = ir::Pass::kBackwardWeight};
    };
    DeviceOrder order = warmup_then_alternate(
        std::min(shape.devices - 1 - device, m), m, [&](int64_t k) { return forward(device, k); },
        [&](int64_t k, DeviceOrder& device_order) {
          device_order.push_back(
              {.stage = device, .microbatch = k, .pass = ir::Pass::kBackwardInput});
          if (k >= deferred) device_order.push_back(weight(k - deferred));
        });
    for (int64_t mb = std::max<int64_t>(m - deferred, 0); mb < m; ++mb) {
      order.push_back(weight(mb));
    }
    orders.push_back(std::move(order));
  }
  return orders;
}

PipelineOrder pipeline_order(std::string_view schedule, const PipelineShape& shape,
                             std::string_view path) {
  if (schedule == "gpipe") return gpipe(shape, path);
  if (schedule == "1f1b") return one_f_one_b(shape, path);
  if (schedule == "interleaved") return interleaved(shape, path);
  if (schedule == "zb-h1") return zb_h1(shape, path);
  if (schedule == "dualpipe") return dualpipe(shape, path);
  if (schedule == "dualpipev") return dualpipev(shape, path);
  fail(path, "schedule",
       "unknown schedule \"" + std::string(schedule) +
           "\"; Piper generates gpipe, 1f1b, interleaved, zb-h1, dualpipe and dualpipev");
}

}  // namespace piper::planner::schedule
