#include "engine/runtime/trace.h"

#include <algorithm>

#include "formats/plan_text.h"

namespace piper::engine {
namespace {

bool is_comm(const plan::Instruction& instruction) {
  return instruction.has_collective() || instruction.has_send() || instruction.has_recv();
}

double micros(double seconds) { return seconds * 1e6; }

std::string kernel_name(const plan::Instruction& instruction) {
  if (instruction.has_kernel()) return instruction.kernel().op_type();
  if (instruction.has_collective()) {
    return plan::Collective::Kind_Name(instruction.collective().kind());
  }
  return instruction.has_send() ? "send" : "recv";
}

}  // namespace

nlohmann::json chrome_trace(const plan::Plan& plan, const StepTrace& trace, int64_t step,
                            const std::string& device) {
  const int rank = static_cast<int>(plan.header().rank());
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"},
                    {"name", "process_name"},
                    {"pid", rank},
                    {"args", {{"name", "rank " + std::to_string(rank)}}}});
  events.push_back({{"ph", "M"},
                    {"name", "process_sort_index"},
                    {"pid", rank},
                    {"args", {{"sort_index", rank}}}});
  const size_t streams = std::min<size_t>(trace.streams.size(), plan.streams_size());
  for (size_t s = 0; s < streams; ++s) {
    const plan::Stream& stream = plan.streams(static_cast<int>(s));
    const auto& times = trace.streams[s];
    const int tid = static_cast<int>(s);
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", rank},
                      {"tid", tid},
                      {"args", {{"name", stream.name()}}}});
    events.push_back({{"ph", "M"},
                      {"name", "thread_sort_index"},
                      {"pid", rank},
                      {"tid", tid},
                      {"args", {{"sort_index", tid}}}});
    const int count = std::min<int>(stream.instructions_size(), static_cast<int>(times.size()));
    for (int i = 0; i < count;) {
      if (!times[i].ran) {
        ++i;
        continue;
      }
      // One task: the timed instructions that follow with the same task, events between them
      // included.
      const plan::Instruction& first = stream.instructions(i);
      double start = times[i].start;
      double end = times[i].end;
      int kernels = 0;
      int j = i;
      for (; j < count && stream.instructions(j).task() == first.task(); ++j) {
        if (!times[j].ran) continue;
        const plan::Instruction& instruction = stream.instructions(j);
        start = std::min(start, times[j].start);
        end = std::max(end, times[j].end);
        ++kernels;
        events.push_back({{"ph", "X"},
                          {"cat", "kernel"},
                          {"name", kernel_name(instruction)},
                          {"pid", rank},
                          {"tid", tid},
                          {"ts", micros(times[j].start)},
                          {"dur", micros(times[j].end - times[j].start)},
                          {"args", {{"label", instruction.label()}, {"instruction", j}}}});
      }
      const std::string name = is_comm(first) ? first.label()
                                              : formats::pass_to_text(first.pass()) + " mb" +
                                                    std::to_string(first.microbatch());
      events.push_back({{"ph", "X"},
                        {"cat", is_comm(first) ? "comm" : "compute"},
                        {"name", name},
                        {"pid", rank},
                        {"tid", tid},
                        {"ts", micros(start)},
                        {"dur", micros(end - start)},
                        {"args",
                         {{"task", first.task()},
                          {"pass", formats::pass_to_text(first.pass())},
                          {"microbatch", first.microbatch()},
                          {"kernels", kernels}}}});
      i = j;
    }
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"plan_id", plan.header().plan_id()},
            {"rank", rank},
            {"step", step},
            {"device", device},
            {"clock", device == "cpu" ? "host: when each kernel ran"
                                      : "host: when each kernel was issued to the device"}}}};
}

}  // namespace piper::engine
