// Writes the simulated step into the plans (Plan.planned_tasks and
// Plan.planned_step, docs/plan-format.md), for piper-plan's report and
// piper-dump --schedule.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "planner/ir/task_graph.h"
#include "planner/sim/cost_model.h"
#include "planner/sim/step_simulation.h"
#include "schemas/plan.pb.h"

namespace piper::planner::sim {

// A short label for pictures: the pass and microbatch of a compute task
// ("F3", "BW0", "U" for the update), an abbreviation of a comm task's kind
// ("AR", "RS", "AG", "A2A", "BC"), with the microbatch for send and recv ("S3", "R3"; "L3"
// for the transfer of a microbatch's loss to the ranks that report it).
std::string task_label(const ir::TaskGraph& graph, const ir::Task& task);

// Simulates one step of `graph` with the cost model (step_simulation.h) and
// fills planned_tasks and planned_step of plans[r], the plan of rank r, with
// rank r's tasks ordered by start, each pipeline stage's compute task with its stage, chunk
// and direction (schemas/plan.proto). Throws piper::Error as simulate() does.
void add_planned_timeline(const ir::TaskGraph& graph, const DeviceRates& rates,
                          std::vector<plan::Plan>& plans);

class StageLayout;

// The same, one plan at a time: the step is simulated once, when this is made, and add_to
// writes device `device`'s share into a plan (nothing for a device the DAG does not use), so
// that plans lowered one by one need not all be held. `graph` must outlive this.
class PlannedTimeline {
 public:
  PlannedTimeline(const ir::TaskGraph& graph, const DeviceRates& rates);
  ~PlannedTimeline();
  void add_to(plan::Plan& plan, int device) const;

 private:
  const ir::TaskGraph& graph_;
  const DeviceRates rates_;
  const StepSimulation simulation_;
  std::unique_ptr<const StageLayout> layout_;
  // Per task of the DAG, computed once for every device that runs it: a compute task's flops,
  // and whether it has reshards (only then does add_to ask for their spans on the device).
  std::vector<double> flops_;
  std::vector<bool> has_reshards_;
};

}  // namespace piper::planner::sim
