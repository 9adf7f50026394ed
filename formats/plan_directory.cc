#include "formats/plan_directory.h"

#include <google/protobuf/arena.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <thread>

#include "formats/error.h"
#include "formats/plan_file.h"

namespace piper::formats {
namespace {

namespace fs = std::filesystem;

// Staging folders carry this prefix; one left by a killed piper-plan is Piper's to remove.
constexpr std::string_view kStagingPrefix = ".piper-plan.";

std::optional<int> rank_of_plan_file(const std::string& name) {
  static const std::regex pattern(R"(rank(\d{1,6})\.plan)");
  std::smatch match;
  if (!std::regex_match(name, match, pattern)) return std::nullopt;
  return std::stoi(match[1]);
}

std::string plan_file_name(int rank) { return "rank" + std::to_string(rank) + ".plan"; }

bool is_staging_folder(const std::string& name) { return name.rfind(kStagingPrefix, 0) == 0; }

std::string staging_name(const std::string& stem) {
  return std::string(kStagingPrefix) + stem + std::to_string(::getpid());
}

// Blocks of the arena a writing thread makes its plans on: a large job's plan takes a few MiB.
constexpr size_t kArenaBlockBytes = size_t{1} << 20;

// Each plan is made just before it is written and dropped after: one is held at a time by each
// of `threads` threads, which take runs of the ranks of `order` in turn.
void write_plans_into(const std::vector<int>& order, const NewPlanSource& new_source,
                      const fs::path& folder, int threads) {
  const int world_size = static_cast<int>(order.size());
  // Each thread takes runs of consecutive ranks of `order` (four runs a thread), so that a
  // source sees most ranks of a symmetry class one after another.
  const int chunk = std::max(1, (world_size + 4 * threads - 1) / (4 * threads));
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  const auto work = [&] {
    try {
      const PlanSource plan_of = new_source();
      for (int first = next.fetch_add(chunk); first < world_size && !failed;
           first = next.fetch_add(chunk)) {
        for (int i = first; i < std::min(first + chunk, world_size) && !failed; ++i) {
          const plan::Plan& plan = plan_of(order[static_cast<size_t>(i)]);
          write_plan_file(
              (folder / plan_file_name(static_cast<int>(plan.header().rank()))).string(), plan);
        }
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mutex);
      if (!first_error) first_error = std::current_exception();
      failed = true;
    }
  };
  std::vector<std::thread> helpers;
  for (int t = 1; t < std::min(threads, world_size); ++t) helpers.emplace_back(work);
  work();
  for (std::thread& helper : helpers) helper.join();
  if (first_error) std::rethrow_exception(first_error);
}

// Runs `write` into a fresh staging folder, removing the folder (Piper's files only) if it
// throws.
template <typename Write>
void staged(const fs::path& staging, Write write) {
  fs::create_directory(staging);
  try {
    write();
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw;
  }
}

// `target` does not exist: the whole folder appears by one rename.
void write_new_directory(const std::vector<int>& order, const NewPlanSource& new_source,
                         const fs::path& target, int threads) {
  fs::create_directories(target.parent_path());
  const fs::path staging = target.parent_path() / staging_name(target.filename().string() + ".");
  staged(staging, [&] {
    write_plans_into(order, new_source, staging, threads);
    fs::rename(staging, target);
  });
}

std::string describe_foreign(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  constexpr size_t kNamed = 5;
  std::string text;
  for (size_t i = 0; i < std::min(names.size(), kNamed); ++i) {
    text += (i ? ", '" : "'") + names[i] + "'";
  }
  if (names.size() > kNamed) text += " and " + std::to_string(names.size() - kNamed) + " more";
  return text;
}

// `target` is a folder: each plan file is replaced in place, nothing else is touched.
void write_into_directory(const std::vector<int>& order, const NewPlanSource& new_source,
                          const fs::path& target, bool force, int threads) {
  const int world_size = static_cast<int>(order.size());
  std::vector<std::string> foreign;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(target)) {
    const std::string name = entry.path().filename().string();
    if (const auto rank = rank_of_plan_file(name)) {
      if (*rank >= world_size) stale.push_back(entry.path());
    } else if (is_staging_folder(name)) {
      stale.push_back(entry.path());
    } else {
      foreign.push_back(name);
    }
  }
  if (!foreign.empty() && !force) {
    throw Error("-o '" + target.string() + "' is not empty and not a folder of plans: it holds " +
                describe_foreign(foreign) +
                ", which piper-plan did not write; plan into a new or empty folder, or pass "
                "--force to replace only its rank<N>.plan files");
  }
  const fs::path staging = target / staging_name("");
  staged(staging, [&] {
    write_plans_into(order, new_source, staging, threads);
    for (int rank = 0; rank < world_size; ++rank) {
      const std::string name = plan_file_name(rank);
      fs::rename(staging / name, target / name);
    }
  });
  fs::remove_all(staging);
  for (const fs::path& path : stale) fs::remove_all(path);
}

}  // namespace

std::vector<std::string> rank_plan_paths(const std::string& dir, const std::string& what) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    throw Error(what + " is not a directory of plans (piper-plan -o DIR writes one)");
  }
  std::map<int, std::string> paths;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (const auto rank = rank_of_plan_file(entry.path().filename().string())) {
      paths[*rank] = entry.path().string();
    }
  }
  if (paths.empty()) throw Error(what + " holds no rank<N>.plan files");
  std::vector<std::string> ordered;
  for (int rank = 0; rank <= paths.rbegin()->first; ++rank) {
    const auto found = paths.find(rank);
    if (found == paths.end()) {
      throw Error(what + " has " + plan_file_name(paths.rbegin()->first) + " but no " +
                  plan_file_name(rank));
    }
    ordered.push_back(found->second);
  }
  return ordered;
}

void write_plan_directory(const std::vector<plan::Plan>& plans, const std::string& dir,
                          bool force) {
  write_plan_directory(
      static_cast<int>(plans.size()), [&](int rank, plan::Plan& plan) { plan = plans.at(rank); },
      dir, force);
}

void write_plan_directory(int world_size, const PlanOfRank& plan_of, const std::string& dir,
                          bool force, int threads) {
  std::vector<int> order(static_cast<size_t>(world_size));
  for (int rank = 0; rank < world_size; ++rank) order[static_cast<size_t>(rank)] = rank;
  // Each thread's plans are made on its arena, cleared before the next.
  const NewPlanSource on_arena = [&plan_of]() -> PlanSource {
    google::protobuf::ArenaOptions options;
    options.start_block_size = kArenaBlockBytes;
    options.max_block_size = kArenaBlockBytes;
    auto arena = std::make_shared<google::protobuf::Arena>(options);
    return [arena, &plan_of](int rank) -> const plan::Plan& {
      arena->Reset();
      plan::Plan& plan = *google::protobuf::Arena::CreateMessage<plan::Plan>(arena.get());
      plan_of(rank, plan);
      return plan;
    };
  };
  write_plan_directory(order, on_arena, dir, force, threads);
}

void write_plan_directory(const std::vector<int>& order, const NewPlanSource& new_source,
                          const std::string& dir, bool force, int threads) {
  try {
    // Canonical, so that "." and "plans/" name the folder itself and staging lands beside or
    // inside it, never in a folder that is then replaced.
    fs::path target = fs::weakly_canonical(fs::absolute(dir));
    if (target.filename().empty()) target = target.parent_path();
    std::error_code error;
    const fs::file_status status = fs::status(target, error);
    if (!fs::exists(status)) {
      write_new_directory(order, new_source, target, threads);
    } else if (fs::is_directory(status)) {
      write_into_directory(order, new_source, target, force, threads);
    } else {
      throw Error("-o '" + target.string() + "' exists and is not a folder");
    }
  } catch (const fs::filesystem_error& error) {
    throw Error("cannot write the plans into '" + dir + "': " + error.code().message() + " (" +
                error.path1().string() + ")");
  }
}

}  // namespace piper::formats
