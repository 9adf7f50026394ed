#include "engine/launch/trace_merge.h"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "formats/atomic_file.h"
#include "formats/error.h"

namespace piper::engine {
namespace {

double origin_of(const nlohmann::json& trace, const std::string& source) {
  const auto other = trace.find("otherData");
  if (!trace.is_object() || !trace.contains("traceEvents") || other == trace.end() ||
      !other->contains("origin_unix_us") || !(*other)["origin_unix_us"].is_number()) {
    throw Error(source + " is not a trace piper-run wrote (no traceEvents or " +
                "otherData.origin_unix_us)");
  }
  return (*other)["origin_unix_us"].get<double>();
}

}  // namespace

nlohmann::json merge_traces(const std::vector<nlohmann::json>& ranks,
                            const std::vector<std::string>& sources) {
  if (ranks.empty()) throw Error("no rank traces to merge");
  std::vector<double> origins;
  for (size_t r = 0; r < ranks.size(); ++r) origins.push_back(origin_of(ranks[r], sources[r]));
  const double origin = *std::min_element(origins.begin(), origins.end());
  const nlohmann::json& first = ranks.front()["otherData"];
  nlohmann::json events = nlohmann::json::array();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const nlohmann::json& other = ranks[r]["otherData"];
    if (other.value("plan_id", "") != first.value("plan_id", "")) {
      throw Error(sources[r] + " comes from another planning run (plan id '" +
                  other.value("plan_id", "") + "', " + sources.front() + " has '" +
                  first.value("plan_id", "") + "')");
    }
    const double shift = origins[r] - origin;
    for (nlohmann::json event : ranks[r]["traceEvents"]) {
      if (event.contains("ts")) event["ts"] = event["ts"].get<double>() + shift;
      events.push_back(std::move(event));
    }
  }
  nlohmann::json other = first;
  other.erase("rank");
  other["ranks"] = ranks.size();
  other["origin_unix_us"] = origin;
  other["clock"] = "each rank's host times, aligned by the system clock of its first traced step";
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", other}};
}

RankTraces::RankTraces(std::string target) : target_(std::move(target)) {
  const std::filesystem::path path = std::filesystem::absolute(target_);
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw Error("--trace '" + target_ + "' is a folder; give the path of a file");
  }
  std::string folder = (path.parent_path() / ("." + path.filename().string() + ".ranks-XXXXXX"));
  if (::mkdtemp(folder.data()) == nullptr) {
    throw Error("--trace '" + target_ + "': cannot make a folder for the ranks' traces in '" +
                path.parent_path().string() + "': " + std::strerror(errno));
  }
  folder_ = folder;
}

RankTraces::~RankTraces() {
  std::error_code error;
  std::filesystem::remove_all(folder_, error);
}

std::string RankTraces::pattern() const { return folder_ + "/rank%r.json"; }

std::string RankTraces::merge(int world_size) const {
  std::vector<nlohmann::json> ranks;
  std::vector<std::string> sources;
  for (int rank = 0; rank < world_size; ++rank) {
    sources.push_back(folder_ + "/rank" + std::to_string(rank) + ".json");
    try {
      ranks.push_back(nlohmann::json::parse(formats::read_file(sources.back())));
    } catch (const std::exception& error) {
      throw Error("--trace: rank " + std::to_string(rank) + "'s trace: " + error.what());
    }
  }
  const nlohmann::json merged = merge_traces(ranks, sources);
  try {
    formats::write_file_atomically(target_, merged.dump() + "\n");
  } catch (const std::exception& error) {
    throw Error(std::string("--trace: ") + error.what());
  }
  return "merged the traces of " + std::to_string(world_size) +
         (world_size == 1 ? " rank" : " ranks") + " into " + target_;
}

}  // namespace piper::engine
