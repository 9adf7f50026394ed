// piper-launch --trace FILE: the traces every rank wrote (engine/runtime/trace.h) as one
// Chrome/Perfetto trace on one clock, each rank a process, with the flow arrows of the ranks'
// transfers joining in it (each rank writes its end of a transfer: the send's start, the recv's
// end, under one id).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace piper::engine {

// `ranks[r]` is rank r's trace, parsed; `sources[r]` its file, for errors. The events of each
// are shifted by how much later its clock origin (otherData.origin_unix_us: the system clock
// at its first traced step) is than the earliest rank's, so that every timestamp counts from
// the earliest traced step of the job. Throws piper::Error naming a file that is no rank trace
// of the same planning run as the first.
nlohmann::json merge_traces(const std::vector<nlohmann::json>& ranks,
                            const std::vector<std::string>& sources);

// The ranks' traces on their way to one file: a fresh folder beside `target` that the ranks
// write rank<N>.json into (pattern()), removed when this goes.
class RankTraces {
 public:
  // Throws piper::Error when `target` is a folder or its folder cannot be written.
  explicit RankTraces(std::string target);
  ~RankTraces();
  RankTraces(const RankTraces&) = delete;
  RankTraces& operator=(const RankTraces&) = delete;

  // piper-run's --trace for the ranks: FOLDER/rank%r.json.
  std::string pattern() const;
  // Merges the files of ranks 0 .. world_size-1 into the target, atomically; returns what it
  // wrote, for piper-launch to say.
  std::string merge(int world_size) const;

 private:
  std::string target_;
  std::string folder_;
};

}  // namespace piper::engine
