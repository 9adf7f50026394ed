#include "engine/runtime/trace.h"

#include <algorithm>
#include <set>

#include "formats/error.h"
#include "formats/flag_list.h"
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

// The flow end a send or recv writes: the send's start, or (bound to the recv's slice, "bp":
// "e") a point inside the recv at most half a microsecond before it ends, when the data has
// arrived (a recv may wait long before its send starts).
nlohmann::json flow_event(const plan::Instruction& instruction, int rank, int tid, int64_t step,
                          double start_us, double end_us) {
  const bool send = instruction.has_send();
  const int peer = send ? instruction.send().peer() : instruction.recv().peer();
  const int tag = send ? instruction.send().tag() : instruction.recv().tag();
  nlohmann::json event = {
      {"ph", send ? "s" : "f"},
      {"cat", "transfer"},
      {"name", instruction.label()},
      {"id", transfer_flow_id(step, send ? rank : peer, send ? peer : rank, tag)},
      {"pid", rank},
      {"tid", tid},
      {"ts", send ? start_us : end_us - std::min(0.5, (end_us - start_us) / 2)}};
  if (!send) event["bp"] = "e";
  return event;
}

void add_metadata(const plan::Plan& plan, size_t streams, nlohmann::json& events) {
  const int rank = static_cast<int>(plan.header().rank());
  events.push_back({{"ph", "M"},
                    {"name", "process_name"},
                    {"pid", rank},
                    {"args", {{"name", "rank " + std::to_string(rank)}}}});
  events.push_back({{"ph", "M"},
                    {"name", "process_sort_index"},
                    {"pid", rank},
                    {"args", {{"sort_index", rank}}}});
  for (size_t s = 0; s < streams; ++s) {
    const int tid = static_cast<int>(s);
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", rank},
                      {"tid", tid},
                      {"args", {{"name", plan.streams(tid).name()}}}});
    events.push_back({{"ph", "M"},
                      {"name", "thread_sort_index"},
                      {"pid", rank},
                      {"tid", tid},
                      {"args", {{"sort_index", tid}}}});
  }
}

// The events of one stream in one step, `offset_us` after the first traced step's start.
void add_stream(const plan::Plan& plan, const TracedStep& traced, size_t s, double offset_us,
                nlohmann::json& events) {
  const int rank = static_cast<int>(plan.header().rank());
  const plan::Stream& stream = plan.streams(static_cast<int>(s));
  const auto& times = traced.trace.streams[s];
  const int tid = static_cast<int>(s);
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
      const double kernel_start = offset_us + micros(times[j].start);
      const double kernel_end = offset_us + micros(times[j].end);
      events.push_back({{"ph", "X"},
                        {"cat", "kernel"},
                        {"name", kernel_name(instruction)},
                        {"pid", rank},
                        {"tid", tid},
                        {"ts", kernel_start},
                        {"dur", kernel_end - kernel_start},
                        {"args", {{"label", instruction.label()}, {"instruction", j}}}});
      if (instruction.has_send() || instruction.has_recv()) {
        events.push_back(flow_event(instruction, rank, tid, traced.step, kernel_start, kernel_end));
      }
    }
    const std::string name = is_comm(first) ? first.label()
                                            : formats::pass_to_text(first.pass()) + " mb" +
                                                  std::to_string(first.microbatch());
    events.push_back({{"ph", "X"},
                      {"cat", is_comm(first) ? "comm" : "compute"},
                      {"name", name},
                      {"pid", rank},
                      {"tid", tid},
                      {"ts", offset_us + micros(start)},
                      {"dur", micros(end - start)},
                      {"args",
                       {{"step", traced.step},
                        {"task", first.task()},
                        {"pass", formats::pass_to_text(first.pass())},
                        {"microbatch", first.microbatch()},
                        {"kernels", kernels}}}});
    i = j;
  }
}

int64_t parse_step(const std::string& text, const std::string& part) {
  const int64_t step = formats::is_count(text, 12) ? std::stoll(text) : 0;
  if (step < 1) {
    throw Error("--trace-steps: '" + part +
                "' is not a step (from 1) or a range of them (\"10-12\"); e.g. 5,10-12");
  }
  return step;
}

}  // namespace

uint64_t transfer_flow_id(int64_t step, int sender, int receiver, int tag) {
  uint64_t hash = 14695981039346656037ull;  // FNV-1a 64
  for (int64_t value : {step, int64_t{sender}, int64_t{receiver}, int64_t{tag}}) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= static_cast<uint64_t>(value >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  }
  return hash & ((uint64_t{1} << 53) - 1);
}

std::vector<int64_t> parse_step_list(const std::string& text) {
  std::set<int64_t> steps;
  for (const std::string& part : formats::split_commas(text)) {
    const size_t dash = part.find('-');
    const int64_t first = parse_step(part.substr(0, dash), part);
    const int64_t last =
        dash == std::string::npos ? first : parse_step(part.substr(dash + 1), part);
    if (last < first) throw Error("--trace-steps: '" + part + "' runs backwards");
    if (last - first > 1000000) throw Error("--trace-steps: '" + part + "' spans too many steps");
    for (int64_t step = first; step <= last; ++step) steps.insert(step);
  }
  return {steps.begin(), steps.end()};
}

nlohmann::json chrome_trace(const plan::Plan& plan, const std::vector<TracedStep>& steps,
                            const std::string& device) {
  const int rank = static_cast<int>(plan.header().rank());
  nlohmann::json events = nlohmann::json::array();
  size_t streams = plan.streams_size();
  for (const TracedStep& traced : steps) {
    streams = std::min<size_t>(streams, traced.trace.streams.size());
  }
  add_metadata(plan, streams, events);
  const double origin = steps.empty() ? 0 : steps.front().trace.start_unix_us;
  nlohmann::json numbers = nlohmann::json::array();
  for (const TracedStep& traced : steps) {
    numbers.push_back(traced.step);
    for (size_t s = 0; s < streams; ++s) {
      add_stream(plan, traced, s, traced.trace.start_unix_us - origin, events);
    }
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"plan_id", plan.header().plan_id()},
            {"rank", rank},
            {"step", steps.empty() ? 0 : steps.back().step},
            {"steps", numbers},
            {"origin_unix_us", origin},
            {"device", device},
            {"clock", device == "cpu" ? "host: when each kernel ran"
                                      : "host: when each kernel was issued to the device"}}}};
}

nlohmann::json chrome_trace(const plan::Plan& plan, const StepTrace& trace, int64_t step,
                            const std::string& device) {
  return chrome_trace(plan, std::vector<TracedStep>{{step, trace}}, device);
}

}  // namespace piper::engine
