// Devices of one node that share their compute (CPU ranks of one machine share its cores,
// caches and memory bus) run a kernel faster while the node's other devices idle than while all
// of them compute: a profile taken by several ranks times both (formats/measured_costs.h,
// "alone"). NodeContention holds, for each device, how many of its node's other devices compute
// at each moment of a simulated step, and times an instance through it: at each moment the
// instance progresses at the rate that share gives, its time interpolated linearly between its
// time alone (no other device computing) and together (every other one computing). Between the
// two ends this is a model, not a measurement: the profile times only the ends.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "planner/ir/task_graph.h"
#include "planner/sim/step_simulation.h"

namespace piper::planner::sim {

class NodeContention {
 public:
  // The compute spans of `simulations` (steps of `graph`), each counting as an equal share of
  // the whole; devices r / devices_per_node share a node (0: every device on one node).
  NodeContention(const ir::TaskGraph& graph, const std::vector<const StepSimulation*>& simulations,
                 int64_t devices_per_node);

  // When an instance on `device` that starts at `start` ends, taking `together` seconds where
  // every other device of its node computes throughout and `alone` where none does (always, on
  // a node of one device).
  double end(int device, double start, double together, double alone) const;

 private:
  struct Step {
    double time = 0;       // from this time on, until the next step's
    double computing = 0;  // the node's other devices computing
  };
  std::vector<std::vector<Step>> others_;  // per device
  std::vector<int> node_size_;             // per device: devices on its node
};

}  // namespace piper::planner::sim
