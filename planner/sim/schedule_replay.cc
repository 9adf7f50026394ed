#include "planner/sim/schedule_replay.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>

namespace piper::planner::sim {
namespace {

using schedule::Slot;
// direction, stage, microbatch, pass
using SlotKey = std::tuple<int64_t, int64_t, int64_t, ir::Pass>;

SlotKey key(const Slot& slot) { return {slot.direction, slot.stage, slot.microbatch, slot.pass}; }

struct Position {
  int64_t device = 0;
  size_t slot = 0;
};

std::string at(const Position& position) {
  return "device " + std::to_string(position.device) + " slot " + std::to_string(position.slot);
}

// What a slot waits for: each entry lists alternatives, one of which must
// have run (the backward of the next stage may be whole or split).
std::vector<std::vector<Slot>> dependencies(const Slot& slot, int64_t last_stage) {
  const auto on = [&](int64_t stage, ir::Pass pass) {
    return Slot{
        .stage = stage, .microbatch = slot.microbatch, .pass = pass, .direction = slot.direction};
  };
  switch (slot.pass) {
    case ir::Pass::kForward:
      if (slot.stage == 0) return {};
      return {{on(slot.stage - 1, ir::Pass::kForward)}};
    case ir::Pass::kBackward:
    case ir::Pass::kBackwardInput:
      if (slot.stage == last_stage) return {{on(slot.stage, ir::Pass::kForward)}};
      return {
          {on(slot.stage + 1, ir::Pass::kBackward), on(slot.stage + 1, ir::Pass::kBackwardInput)},
          {on(slot.stage, ir::Pass::kForward)}};
    case ir::Pass::kBackwardWeight:
      return {{on(slot.stage, ir::Pass::kBackwardInput)}};
    case ir::Pass::kUpdate:
      break;
  }
  throw Error("pass U has no place in a pipeline schedule");
}

// "B2 or BI2 of stage 2".
std::string describe(const std::vector<Slot>& alternatives) {
  std::string text;
  for (const Slot& slot : alternatives) {
    if (!text.empty()) text += " or ";
    text += ir::to_string(slot.pass) + std::to_string(slot.microbatch);
  }
  return text + " of stage " + std::to_string(alternatives.front().stage);
}

// Where every slot is listed; rejects what the replay cannot give a meaning.
std::map<SlotKey, Position> index_slots(const schedule::PipelineOrder& order) {
  std::map<SlotKey, Position> positions;
  for (size_t device = 0; device < order.size(); ++device) {
    for (size_t i = 0; i < order[device].size(); ++i) {
      const Slot& slot = order[device][i];
      const Position here{static_cast<int64_t>(device), i};
      if (slot.pass == ir::Pass::kUpdate) {
        throw Error(at(here) +
                    ": pass U has no place in a pipeline schedule; slots run F, B, BI "
                    "or BW");
      }
      if (slot.stage < 0 || slot.microbatch < 0) {
        throw Error(at(here) + ": stage and microbatch must be >= 0, got " +
                    schedule::to_string(slot));
      }
      const auto [it, inserted] = positions.emplace(key(slot), here);
      if (!inserted) {
        throw Error(at(here) + ": " + schedule::to_string(slot) + " is already at " +
                    at(it->second));
      }
    }
  }
  return positions;
}

int64_t peak_live_activations(const schedule::DeviceOrder& order) {
  int64_t live = 0;
  int64_t peak = 0;
  for (const Slot& slot : order) {
    if (slot.pass == ir::Pass::kForward) peak = std::max(peak, ++live);
    if (slot.pass == ir::Pass::kBackward || slot.pass == ir::Pass::kBackwardWeight) --live;
  }
  return peak;
}

class Replayer {
 public:
  Replayer(const schedule::PipelineOrder& order, const PassDurations& durations)
      : order_(order), durations_(durations), positions_(index_slots(order)) {
    for (const auto& [slot_key, position] : positions_) {
      last_stage_ = std::max(last_stage_, std::get<1>(slot_key));
    }
  }

  ReplayResult run() {
    std::vector<size_t> next(order_.size(), 0);
    std::vector<double> free_at(order_.size(), 0);
    result_.devices.resize(order_.size());
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t device = 0; device < order_.size(); ++device) {
        while (next[device] < order_[device].size()) {
          const Slot& slot = order_[device][next[device]];
          const std::optional<double> ready = ready_time(slot, static_cast<int64_t>(device));
          if (!ready) break;
          const double start = std::max(free_at[device], *ready);
          free_at[device] = start + durations_.of(slot.pass);
          finished_[key(slot)] = free_at[device];
          DeviceReplay& replay = result_.devices[device];
          replay.starts.push_back(start);
          replay.busy += durations_.of(slot.pass);
          ++next[device];
          progress = true;
        }
      }
    }
    for (size_t device = 0; device < order_.size(); ++device) {
      if (next[device] < order_[device].size()) throw deadlock(device, next);
    }
    for (size_t device = 0; device < order_.size(); ++device) {
      result_.makespan = std::max(result_.makespan, free_at[device]);
    }
    for (size_t device = 0; device < order_.size(); ++device) {
      DeviceReplay& replay = result_.devices[device];
      replay.idle = result_.makespan - replay.busy;
      replay.peak_live_activations = peak_live_activations(order_[device]);
    }
    return std::move(result_);
  }

 private:
  // When every dependency of `slot` has arrived on `device`; nullopt while
  // one has not run yet.
  std::optional<double> ready_time(const Slot& slot, int64_t device) const {
    double ready = 0;
    for (const std::vector<Slot>& alternatives : dependencies(slot, last_stage_)) {
      const Slot* done = find_finished(alternatives);
      if (!done) return std::nullopt;
      const double latency = positions_.at(key(*done)).device == device ? 0 : durations_.transfer;
      ready = std::max(ready, finished_.at(key(*done)) + latency);
    }
    return ready;
  }

  const Slot* find_finished(const std::vector<Slot>& alternatives) const {
    for (const Slot& slot : alternatives) {
      if (finished_.contains(key(slot))) return &slot;
    }
    return nullptr;
  }

  DeadlockError deadlock(size_t device, const std::vector<size_t>& next) const {
    const Position stuck{static_cast<int64_t>(device), next[device]};
    const Slot& slot = order_[device][stuck.slot];
    std::string why;
    for (const std::vector<Slot>& alternatives : dependencies(slot, last_stage_)) {
      if (find_finished(alternatives)) continue;
      why = "it needs " + describe(alternatives);
      const auto listed = std::find_if(alternatives.begin(), alternatives.end(),
                                       [&](auto& s) { return positions_.contains(key(s)); });
      if (listed == alternatives.end()) {
        why += ", which no device runs";
      } else if (const Position dependency = positions_.at(key(*listed));
                 dependency.device == stuck.device) {
        why += ", which this device runs later, at slot " + std::to_string(dependency.slot);
      } else {
        const size_t blocker = next[static_cast<size_t>(dependency.device)];
        why += ", which device " + std::to_string(dependency.device) + " runs at slot " +
               std::to_string(dependency.slot) + " but it is stuck at slot " +
               std::to_string(blocker) + " (" +
               schedule::to_string(order_[static_cast<size_t>(dependency.device)][blocker]) + ")";
      }
      break;
    }
    return DeadlockError(stuck.device, stuck.slot,
                         at(stuck) + " (" + schedule::to_string(slot) + ") can never run: " + why);
  }

  const schedule::PipelineOrder& order_;
  const PassDurations& durations_;
  const std::map<SlotKey, Position> positions_;
  int64_t last_stage_ = 0;
  std::map<SlotKey, double> finished_;  // end times of the slots run so far
  ReplayResult result_;
};

}  // namespace

double PassDurations::of(ir::Pass pass) const {
  switch (pass) {
    case ir::Pass::kForward:
      return forward;
    case ir::Pass::kBackward:
      return backward;
    case ir::Pass::kBackwardInput:
      return backward_input;
    case ir::Pass::kBackwardWeight:
      return backward_weight;
    case ir::Pass::kUpdate:
      break;
  }
  throw Error("pass U has no duration in a pipeline schedule");
}

double ReplayResult::bubble_fraction() const {
  if (devices.empty() || makespan <= 0) return 0;
  double idle = 0;
  for (const DeviceReplay& device : devices) idle += device.idle;
  return idle / (makespan * static_cast<double>(devices.size()));
}

ReplayResult replay(const schedule::PipelineOrder& order, const PassDurations& durations) {
  return Replayer(order, durations).run();
}

}  // namespace piper::planner::sim
