#include "formats/comm_volume.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "formats/error.h"
#include "formats/plan_text.h"

namespace piper::formats {
namespace {

// An instruction, named in errors only: every plan's summary walks all of them.
struct Where {
  const plan::Plan& plan;
  const plan::Stream& stream;
  int index;

  std::string text() const {
    return "rank " + std::to_string(plan.header().rank()) + ", stream '" + stream.name() +
           "', instruction " + std::to_string(index);
  }
};

uint64_t tensor_bytes(const plan::Plan& plan, int32_t tensor, const Where& at) {
  if (tensor < 0 || tensor >= plan.tensors_size()) {
    throw Error(at.text() + " names tensor " + std::to_string(tensor) + ", which the plan lacks");
  }
  return plan.tensors(tensor).bytes();
}

int64_t group_size(const plan::Plan& plan, int32_t id, const Where& at) {
  for (const plan::CommGroup& group : plan.groups()) {
    if (group.id() == id) return group.ranks_size();
  }
  throw Error(at.text() + " names communicator group " + std::to_string(id) +
              ", which the plan lacks");
}

CommKind kind_of(plan::Collective::Kind kind) {
  switch (kind) {
    case plan::Collective::ALL_REDUCE:
      return CommKind::kAllReduce;
    case plan::Collective::REDUCE_SCATTER:
      return CommKind::kReduceScatter;
    case plan::Collective::ALL_GATHER:
      return CommKind::kAllGather;
    case plan::Collective::ALL_TO_ALL:
    case plan::Collective::ALL_TO_ALL_V:
    case plan::Collective::ALL_TO_ALL_V_RETURN:
      return CommKind::kAllToAll;
    default:
      return CommKind::kBroadcast;
  }
}

// The share of the buffer a ring sends from one member of a group of n.
double ring_share(const plan::Plan& plan, const plan::Collective& collective, double n) {
  switch (collective.kind()) {
    case plan::Collective::ALL_REDUCE:
      return 2 * (n - 1) / n;
    case plan::Collective::BROADCAST: {
      int32_t member = -1;
      for (const plan::CommGroup& group : plan.groups()) {
        if (group.id() != collective.group()) continue;
        const auto& ranks = group.ranks();
        const auto found = std::find(ranks.begin(), ranks.end(), plan.header().rank());
        if (found != ranks.end()) member = static_cast<int32_t>(found - ranks.begin());
      }
      return n > 1 && member == collective.root() ? 1 : 0;
    }
    default:
      return (n - 1) / n;
  }
}

// The tasks that run kernels here, sorted: compute tasks, whose collectives are reshards.
std::vector<int32_t> compute_tasks(const plan::Plan& plan) {
  std::vector<int32_t> tasks;
  for (const plan::Stream& stream : plan.streams()) {
    for (const plan::Instruction& instruction : stream.instructions()) {
      if (instruction.has_kernel()) tasks.push_back(instruction.task());
    }
  }
  std::sort(tasks.begin(), tasks.end());
  tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
  return tasks;
}

void add_collective(const plan::Plan& plan, const plan::Collective& collective, bool reshard,
                    const Where& at, CommVolume& volume) {
  uint64_t bytes = 0;
  const int pairs = std::max(collective.inputs_size(), collective.outputs_size());
  for (int i = 0; i < pairs; ++i) {
    const uint64_t in =
        i < collective.inputs_size() ? tensor_bytes(plan, collective.inputs(i), at) : 0;
    const uint64_t out =
        i < collective.outputs_size() ? tensor_bytes(plan, collective.outputs(i), at) : 0;
    bytes += std::max(in, out);
  }
  const double n = static_cast<double>(group_size(plan, collective.group(), at));
  CommTotal& total =
      volume.at(reshard ? CommScope::kReshard : CommScope::kTask, kind_of(collective.kind()));
  total.count += 1;
  total.bytes += bytes;
  total.sent_bytes += ring_share(plan, collective, n) * static_cast<double>(bytes);
}

void add_transfer(CommKind kind, uint64_t bytes, CommVolume& volume) {
  CommTotal& total = volume.at(CommScope::kTask, kind);
  total.count += 1;
  total.bytes += bytes;
  if (kind == CommKind::kSend) total.sent_bytes += static_cast<double>(bytes);
}

const char* scope_name(CommScope scope) {
  return scope == CommScope::kReshard ? "tensor/expert-parallel" : "data-parallel";
}

// "tensor/expert-parallel all-reduce", "send": transfers are always tasks of their own.
std::string row_name(size_t scope, size_t kind) {
  const auto k = static_cast<CommKind>(kind);
  if (k == CommKind::kSend || k == CommKind::kRecv) return comm_kind_name(k);
  return std::string(scope_name(static_cast<CommScope>(scope))) + " " + comm_kind_name(k);
}

}  // namespace

const char* comm_kind_name(CommKind kind) {
  switch (kind) {
    case CommKind::kAllReduce:
      return "all-reduce";
    case CommKind::kReduceScatter:
      return "reduce-scatter";
    case CommKind::kAllGather:
      return "all-gather";
    case CommKind::kAllToAll:
      return "all-to-all";
    case CommKind::kBroadcast:
      return "broadcast";
    case CommKind::kSend:
      return "send";
    case CommKind::kRecv:
      return "recv";
  }
  return "?";
}

CommVolume comm_volume(const plan::Plan& plan) {
  CommVolume volume;
  const std::vector<int32_t> computing = compute_tasks(plan);
  for (const plan::Stream& stream : plan.streams()) {
    for (int i = 0; i < stream.instructions_size(); ++i) {
      const plan::Instruction& instruction = stream.instructions(i);
      if (instruction.has_collective()) {
        // Only reshards exchange blocks; expert parallelism's run as tasks of their own.
        const bool reshard =
            std::binary_search(computing.begin(), computing.end(), instruction.task()) ||
            kind_of(instruction.collective().kind()) == CommKind::kAllToAll;
        add_collective(plan, instruction.collective(), reshard, Where{plan, stream, i}, volume);
      } else if (instruction.has_send()) {
        add_transfer(CommKind::kSend,
                     tensor_bytes(plan, instruction.send().tensor(), Where{plan, stream, i}),
                     volume);
      } else if (instruction.has_recv()) {
        add_transfer(CommKind::kRecv,
                     tensor_bytes(plan, instruction.recv().tensor(), Where{plan, stream, i}),
                     volume);
      }
    }
  }
  return volume;
}

std::string comm_volume_line(const CommVolume& volume) {
  std::ostringstream out;
  for (size_t scope = 0; scope < kNumCommScopes; ++scope) {
    for (size_t kind = 0; kind < kNumCommKinds; ++kind) {
      const CommTotal& total = volume.totals[scope][kind];
      if (total.count == 0) continue;
      out << (out.tellp() > 0 ? "; " : "") << row_name(scope, kind) << " " << total.bytes << " B ("
          << bytes_to_text(total.bytes) << ") in " << total.count;
    }
  }
  return out.tellp() > 0 ? std::move(out).str() : "none";
}

std::string comm_volume_table(const CommVolume& volume) {
  std::ostringstream out;
  out << "communication per step (docs/cost-model.md): volume is each collective's buffer, sent "
         "what a ring sends from this rank\n";
  char line[160];
  std::snprintf(line, sizeof line, "  %-38s %8s %16s %16s\n", "kind", "count", "volume B",
                "sent B");
  out << line;
  bool any = false;
  for (size_t scope = 0; scope < kNumCommScopes; ++scope) {
    for (size_t kind = 0; kind < kNumCommKinds; ++kind) {
      const CommTotal& total = volume.totals[scope][kind];
      if (total.count == 0) continue;
      any = true;
      std::snprintf(line, sizeof line, "  %-38s %8lld %16llu %16.0f\n",
                    row_name(scope, kind).c_str(), static_cast<long long>(total.count),
                    static_cast<unsigned long long>(total.bytes), total.sent_bytes);
      out << line;
    }
  }
  if (!any) out << "  none\n";
  return std::move(out).str();
}

}  // namespace piper::formats
