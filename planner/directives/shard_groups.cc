// on_shard_groups: how piper-plan orders and renames a strategy's directives around its shard
// directives (directive.h). A tensor-parallel group runs as one device, its leader, so every
// other directive's devices become group indices; a split over the replicas (expert
// parallelism) keeps the replicate's devices, and with a tensor-parallel split too its groups
// are renamed to the groups' indices and it runs first (shard.cc's header).
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "formats/error.h"
#include "planner/directives/directive.h"
#include "planner/ir/types.h"

namespace piper::planner {
namespace {

// Device -> the index of the group it leads.
using Leaders = std::map<int64_t, int64_t>;

int64_t group_of(const Leaders& leaders, int64_t device, const std::string& where,
                 const strategy::ShardDirective& shard) {
  const auto found = leaders.find(device);
  if (found != leaders.end()) return found->second;
  for (const auto& group : shard.groups) {
    if (std::find(group.begin(), group.end(), device) == group.end()) continue;
    throw Error(where + ": device " + std::to_string(device) +
                " is a member of a tensor-parallel group led by device " +
                std::to_string(group.front()) +
                "; other directives name a group by its first device (with a mesh, \"axis\" "
                "does)");
  }
  throw Error(where + ": device " + std::to_string(device) +
              " is in no group of the shard directive; every device must be in one");
}

// Expert parallelism: every group of the shard directive is the device set of a replicate
// directive (the same mesh axis), so the groups split the batch as well as the parameters.
bool splits_over_replicas(const strategy::Strategy& strategy,
                          const strategy::ShardDirective& shard) {
  std::set<std::set<int64_t>> replicated;
  for (const strategy::Directive& directive : strategy.directives) {
    if (const auto* replicate = std::get_if<strategy::ReplicateDirective>(&directive.spec)) {
      replicated.emplace(replicate->devices.begin(), replicate->devices.end());
    }
  }
  return std::all_of(shard.groups.begin(), shard.groups.end(), [&](const auto& group) {
    return replicated.count(std::set<int64_t>(group.begin(), group.end())) > 0;
  });
}

const strategy::ShardDirective& shard_of(const strategy::Directive& directive) {
  return std::get<strategy::ShardDirective>(directive.spec);
}

// The groups of the expert-parallel shard `expert` in the numbering of the tensor-parallel
// one's groups (device g stands for group g): each is a set of devices at one place m of
// their tensor-parallel groups, and those at every other place m form the same sets of groups
// (the two shards split over orthogonal mesh axes).
std::vector<std::vector<int64_t>> groups_of_leaders(const strategy::ShardDirective& tensor,
                                                    const strategy::ShardDirective& expert,
                                                    const std::string& where) {
  std::map<int64_t, std::pair<int64_t, int64_t>> place;  // device -> (group, member)
  for (size_t g = 0; g < tensor.groups.size(); ++g) {
    for (size_t m = 0; m < tensor.groups[g].size(); ++m) {
      place[tensor.groups[g][m]] = {static_cast<int64_t>(g), static_cast<int64_t>(m)};
    }
  }
  std::map<int64_t, std::set<std::vector<int64_t>>> by_member;
  for (const auto& group : expert.groups) {
    std::vector<int64_t> leaders;
    std::set<int64_t> members;
    for (int64_t device : group) {
      const auto found = place.find(device);
      if (found == place.end()) {
        throw Error(where + ": device " + std::to_string(device) +
                    " is in no group of the tensor-parallel shard directive; both shards must "
                    "split the same devices");
      }
      leaders.push_back(found->second.first);
      members.insert(found->second.second);
    }
    if (members.size() != 1) {
      throw Error(where + ": the group " + ir::to_string(group) +
                  " mixes places of the tensor-parallel groups; split experts over the other "
                  "mesh axis (\"axis\": \"dp\" with the tensor-parallel \"axis\": \"tp\")");
    }
    by_member[*members.begin()].insert(leaders);
  }
  const auto& first = by_member.begin()->second;
  const bool alike = std::all_of(by_member.begin(), by_member.end(),
                                 [&](const auto& entry) { return entry.second == first; });
  if (!alike || by_member.size() != tensor.groups.front().size()) {
    throw Error(where +
                ": its groups do not repeat alike at every place of the tensor-parallel "
                "groups; split experts over the other mesh axis");
  }
  return {first.begin(), first.end()};
}

// Which of two shard directives splits over the replicas (expert parallelism): the one whose
// groups include a replicate's device set, as written.
std::optional<size_t> expert_shard(const strategy::Strategy& strategy,
                                   const std::vector<strategy::Directive>& shards) {
  std::set<std::set<int64_t>> replicated;
  for (const strategy::Directive& directive : strategy.directives) {
    if (const auto* replicate = std::get_if<strategy::ReplicateDirective>(&directive.spec)) {
      replicated.emplace(replicate->devices.begin(), replicate->devices.end());
    }
  }
  std::vector<size_t> found;
  for (size_t s = 0; s < shards.size(); ++s) {
    const auto& groups = shard_of(shards[s]).groups;
    if (std::any_of(groups.begin(), groups.end(), [&](const auto& group) {
          return replicated.count(std::set<int64_t>(group.begin(), group.end())) > 0;
        })) {
      found.push_back(s);
    }
  }
  if (found.size() != 1) return std::nullopt;
  return found.front();
}

}  // namespace

strategy::Strategy on_shard_groups(const strategy::Strategy& strategy) {
  std::vector<strategy::Directive> shards, others;
  for (const strategy::Directive& directive : strategy.directives) {
    (std::holds_alternative<strategy::ShardDirective>(directive.spec) ? shards : others)
        .push_back(directive);
  }
  if (shards.empty()) return strategy;
  if (shards.size() > 2) {
    throw Error(strategy.source + ": " + shards[2].path +
                ": a third shard directive; Piper composes one split over the data-parallel "
                "replicas (experts) with one tensor-parallel split");
  }
  // Expert with tensor parallelism: the split over the replicas runs first (see the header).
  std::vector<strategy::Directive> leading;
  if (shards.size() == 2) {
    for (const strategy::Directive& shard : shards) {
      if (shard_of(shard).style != "expert") continue;
      throw Error(strategy.source + ": " + shard.path +
                  ": style \"expert\" (one module per expert) does not compose with a second "
                  "shard directive yet; split experts written as batched parameters with "
                  "\"params\" to combine expert and tensor parallelism");
    }
    const std::optional<size_t> expert = expert_shard(strategy, shards);
    if (!expert) {
      throw Error(strategy.source + ": " + shards[1].path +
                  ": a second shard directive composes only when exactly one of the two splits "
                  "over the device sets of a replicate (expert parallelism over the "
                  "data-parallel axis) and the other over a tensor-parallel axis");
    }
    strategy::Directive experts = shards[*expert];
    const strategy::Directive tensor = shards[1 - *expert];
    auto& split = std::get<strategy::ShardDirective>(experts.spec);
    split.groups = groups_of_leaders(shard_of(tensor), split,
                                     strategy.source + ": " + experts.path + ".devices");
    split.over_replicas = true;
    std::get<strategy::ShardDirective>(shards[1 - *expert].spec).after_expert_split = experts.path;
    leading.push_back(std::move(experts));
    shards = {shards[1 - *expert]};
  } else if (splits_over_replicas(strategy, shard_of(shards[0]))) {
    strategy::Strategy result = strategy;
    std::get<strategy::ShardDirective>(shards[0].spec).over_replicas = true;
    result.directives = shards;
    result.directives.insert(result.directives.end(), others.begin(), others.end());
    return result;
  }
  const auto& shard = shard_of(shards[0]);
  Leaders leaders;
  for (size_t g = 0; g < shard.groups.size(); ++g) {
    leaders[shard.groups[g].front()] = static_cast<int64_t>(g);
  }
  strategy::Strategy result = strategy;
  result.directives = leading;
  result.directives.push_back(shards[0]);
  for (strategy::Directive directive : others) {
    const std::string where = strategy.source + ": " + directive.path;
    const auto rename = [&](std::vector<int64_t>& devices) {
      for (int64_t& device : devices) device = group_of(leaders, device, where + ".devices", shard);
    };
    if (auto* place = std::get_if<strategy::PlaceDirective>(&directive.spec)) {
      rename(place->devices);
    } else if (auto* replicate = std::get_if<strategy::ReplicateDirective>(&directive.spec)) {
      rename(replicate->devices);
    } else if (auto* order = std::get_if<strategy::OrderDirective>(&directive.spec)) {
      if (order->device)
        order->device = group_of(leaders, *order->device, where + ".device", shard);
    }
    result.directives.push_back(std::move(directive));
  }
  if (!leading.empty() && !splits_over_replicas(result, shard_of(leading.front()))) {
    throw Error(strategy.source + ": " + leading.front().path +
                ": its groups are not the device sets of a replicate once each tensor-parallel "
                "group stands for its first device; replicate over the axis it splits over");
  }
  return result;
}

}  // namespace piper::planner
