#include "planner/sim/node_contention.h"

#include <algorithm>
#include <limits>

namespace piper::planner::sim {
namespace {

using Interval = std::pair<double, double>;

}  // namespace

NodeContention::NodeContention(const ir::TaskGraph& graph,
                               const std::vector<const StepSimulation*>& simulations,
                               int64_t devices_per_node) {
  const int devices = static_cast<int>(simulations.at(0)->devices.size());
  const int per_node = devices_per_node > 0 ? static_cast<int>(devices_per_node) : devices;
  const double share = 1.0 / static_cast<double>(simulations.size());
  std::vector<std::vector<std::pair<Interval, double>>> busy(static_cast<size_t>(devices));
  for (const StepSimulation* simulation : simulations) {
    for (int d = 0; d < devices; ++d) {
      for (const Interval& span : compute_intervals(graph, simulation->devices.at(d))) {
        busy[d].emplace_back(span, share);
      }
    }
  }
  others_.resize(static_cast<size_t>(devices));
  node_size_.resize(static_cast<size_t>(devices));
  for (int d = 0; d < devices; ++d) {
    const int first = d / per_node * per_node;
    const int last = std::min(first + per_node, devices);
    node_size_[d] = last - first;
    std::vector<std::pair<double, double>> changes;  // (time, +share or -share)
    for (int other = first; other < last; ++other) {
      if (other == d) continue;
      for (const auto& [span, weight] : busy[other]) {
        changes.emplace_back(span.first, weight);
        changes.emplace_back(span.second, -weight);
      }
    }
    std::sort(changes.begin(), changes.end());
    double count = 0;
    for (const auto& [time, change] : changes) {
      count += change;
      if (!others_[d].empty() && others_[d].back().time == time) {
        others_[d].back().computing = count;
      } else {
        others_[d].push_back({time, count});
      }
    }
  }
}

double NodeContention::end(int device, double start, double together, double alone) const {
  const std::vector<Step>& steps = others_.at(static_cast<size_t>(device));
  const int others = node_size_[device] - 1;
  if (others <= 0) return start + alone;
  if (!(alone < together)) return start + together;
  auto next = std::upper_bound(steps.begin(), steps.end(), start,
                               [](double time, const Step& step) { return time < step.time; });
  double computing = next == steps.begin() ? 0 : std::prev(next)->computing;
  double time = start;
  double left = 1;  // of the instance's work
  while (true) {
    const double seconds = alone + (together - alone) * computing / others;
    const double until = next == steps.end() ? std::numeric_limits<double>::infinity() : next->time;
    if (time + left * seconds <= until) return time + left * seconds;
    left -= (until - time) / seconds;
    time = until;
    computing = next->computing;
    ++next;
  }
}

}  // namespace piper::planner::sim
