#include "engine/launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "engine/comm/launch_environment.h"
#include "engine/comm/rendezvous.h"
#include "engine/comm/secret.h"
#include "engine/comm/socket.h"
#include "engine/launch/trace_merge.h"
#include "formats/error.h"
#include "formats/plan_directory.h"

extern char** environ;

namespace piper::engine {
namespace {

using Clock = std::chrono::steady_clock;

// The launcher variables a child must not inherit: piper-launch gives each child its own.
const std::set<std::string> kLauncherVariables = {"RANK",
                                                  "WORLD_SIZE",
                                                  "LOCAL_RANK",
                                                  "MASTER_ADDR",
                                                  "MASTER_PORT",
                                                  "PIPER_RENDEZVOUS",
                                                  kRendezvousTokenVariable,
                                                  "SLURM_PROCID",
                                                  "SLURM_NTASKS",
                                                  "OMPI_COMM_WORLD_RANK",
                                                  "OMPI_COMM_WORLD_SIZE"};

// Signals arrive here as bytes, so that the poll loop sees them.
int signal_pipe[2] = {-1, -1};

void on_signal(int signal) {
  const int saved = errno;
  const char byte = static_cast<char>(signal);
  [[maybe_unused]] const ssize_t written = ::write(signal_pipe[1], &byte, 1);
  errno = saved;
}

std::string status_text(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    const char* name = ::strsignal(signal);
    return "was killed by signal " + std::to_string(signal) +
           (name != nullptr ? " (" + std::string(name) + ")" : "");
  }
  return "ended with status " + std::to_string(status);
}

bool has_flag(const std::vector<std::string>& args, const std::string& flag) {
  for (const std::string& arg : args) {
    if (arg == flag || arg.rfind(flag + "=", 0) == 0) return true;
  }
  return false;
}

// Copies a child's output line by line behind its rank prefix, noting the ranks its errors
// (stderr) say are not responding.
class PrefixedOutput {
 public:
  PrefixedOutput(int source, int target, int rank)
      : source_(source),
        target_(target),
        rank_(rank),
        prefix_("[rank " + std::to_string(rank) + "] ") {}

  int source() const { return source_; }
  bool open() const { return source_ >= 0; }
  int rank() const { return rank_; }
  const std::vector<int>& reported_not_responding() const { return reported_; }

  // Reads what is available; closes the source at end of file.
  void pump() {
    char chunk[65536];
    const ssize_t got = ::read(source_, chunk, sizeof chunk);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (got <= 0) {
      if (!pending_.empty()) emit(pending_ + "\n");
      pending_.clear();
      ::close(source_);
      source_ = -1;
      return;
    }
    pending_.append(chunk, static_cast<size_t>(got));
    size_t start = 0;
    for (size_t newline; (newline = pending_.find('\n', start)) != std::string::npos;
         start = newline + 1) {
      emit(pending_.substr(start, newline + 1 - start));
    }
    pending_.erase(0, start);
  }

 private:
  void emit(const std::string& line) {
    for (const int rank :
         target_ == STDERR_FILENO ? ranks_reported_not_responding(line) : std::vector<int>{}) {
      if (std::find(reported_.begin(), reported_.end(), rank) == reported_.end()) {
        reported_.push_back(rank);
      }
    }
    const std::string text = prefix_ + line;
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t put = ::write(target_, text.data() + done, text.size() - done);
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) return;  // our own output is gone; keep running the job
      done += static_cast<size_t>(put);
    }
  }

  int source_;
  int target_;
  int rank_;
  std::string prefix_;
  std::string pending_;
  std::vector<int> reported_;
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
};

pid_t spawn(const std::string& program, const std::vector<std::string>& args,
            const std::vector<std::string>& environment, int out_fd, int err_fd) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& entry : environment) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // The child dies with the launcher, never outliving it as an orphan rank.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    ::execve(program.c_str(), argv.data(), envp.data());
    const std::string message =
        "piper-launch: cannot run " + program + ": " + std::strerror(errno) + "\n";
    [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, message.data(), message.size());
    ::_exit(127);
  }
  return pid;
}

std::string free_localhost_port_url() {
  net::Socket probe = net::listen_on("127.0.0.1", 0);
  return "tcp://127.0.0.1:" + std::to_string(net::local_port(probe));
}

// The ranks the others said were not responding, when the first rank to exit is not one of
// them: a stopped rank lives on until it is killed, so it exits last, but it is the cause.
std::string blame(const std::vector<PrefixedOutput>& outputs, int first_to_exit) {
  std::map<int, std::set<int>> reporters;  // silent rank -> ranks that said so
  for (const PrefixedOutput& output : outputs) {
    for (const int rank : output.reported_not_responding()) {
      if (rank != output.rank()) reporters[rank].insert(output.rank());
    }
  }
  if (reporters.empty() || reporters.count(first_to_exit) != 0) return "";
  std::string text;
  for (const auto& [rank, by] : reporters) {
    std::string names;
    for (const int reporter : by) names += (names.empty() ? "" : ",") + std::to_string(reporter);
    text += "rank " + std::to_string(rank) + " was not responding, as " +
            (by.size() == 1 ? "rank " : "ranks ") + names + " reported; ";
  }
  return text;
}

void say(const std::string& message) {
  const std::string line = "piper-launch: " + message + "\n";
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace

std::vector<std::string> find_rank_plans(const std::string& dir) {
  return formats::rank_plan_paths(dir, "--plans '" + dir + "'");
}

std::string default_piper_run() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw Error("cannot find this executable (/proc/self/exe): " + error.message());
  return (self.parent_path() / "piper-run").string();
}

int launch(const LaunchOptions& options) {
  if (has_flag(options.run_args, "--plan")) {
    throw Error("piper-launch gives each rank its --plan from --plans; do not pass --plan");
  }
  if (options.plans_dir.empty() == (options.ranks <= 0)) {
    throw Error("give either --plans DIR (a rank per plan) or --ranks N (ranks without plans)");
  }
  const std::vector<std::string> plans =
      options.plans_dir.empty() ? std::vector<std::string>() : find_rank_plans(options.plans_dir);
  const std::string program = options.piper_run.empty() ? default_piper_run() : options.piper_run;
  if (::access(program.c_str(), X_OK) != 0) {
    throw Error("cannot run piper-run at '" + program + "': " + std::strerror(errno) +
                (options.piper_run.empty() ? " (it is looked for next to piper-launch)" : ""));
  }
  const int world_size = plans.empty() ? options.ranks : static_cast<int>(plans.size());
  std::vector<std::string> run_args = options.run_args;
  std::unique_ptr<RankTraces> traces;
  if (!options.trace_path.empty()) {
    std::string pattern = options.trace_path;
    if (!has_rank_pattern(pattern)) {
      traces = std::make_unique<RankTraces>(options.trace_path);
      pattern = traces->pattern();
    }
    run_args.insert(run_args.end(), {"--trace", pattern});
  }
  std::vector<std::string> common_args;
  if (world_size > 1 && !has_flag(options.run_args, "--rendezvous")) {
    common_args = {"--rendezvous", free_localhost_port_url()};
  }
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    if (kLauncherVariables.count(text.substr(0, text.find('='))) == 0) environment.push_back(text);
  }
  environment.push_back("WORLD_SIZE=" + std::to_string(world_size));
  // The ranks' store admits only holders of the job's secret; it travels in the environment,
  // which other users cannot read, never on a command line.
  const char* token = std::getenv(kRendezvousTokenVariable);
  environment.push_back(std::string(kRendezvousTokenVariable) + "=" +
                        (token != nullptr && *token != '\0' ? token : random_token()));

  if (::pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw Error(std::string("pipe: ") + std::strerror(errno));
  }
  struct sigaction action {};
  action.sa_handler = on_signal;
  ::sigemptyset(&action.sa_mask);
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(signal, &action, nullptr);

  std::vector<Child> children(static_cast<size_t>(world_size));
  std::vector<PrefixedOutput> outputs;
  for (int rank = 0; rank < world_size; ++rank) {
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      throw Error(std::string("pipe: ") + std::strerror(errno));
    }
    std::vector<std::string> args;
    if (!plans.empty()) args = {"--plan", plans[static_cast<size_t>(rank)]};
    args.insert(args.end(), common_args.begin(), common_args.end());
    args.insert(args.end(), run_args.begin(), run_args.end());
    std::vector<std::string> child_environment = environment;
    child_environment.push_back("RANK=" + std::to_string(rank));
    Child& child = children[static_cast<size_t>(rank)];
    child.rank = rank;
    child.pid = spawn(program, args, child_environment, out_pipe[1], err_pipe[1]);
    child.running = true;
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    outputs.emplace_back(out_pipe[0], STDOUT_FILENO, rank);
    outputs.emplace_back(err_pipe[0], STDERR_FILENO, rank);
  }

  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(options.grace_s * 1000));
  int first_failure = -1;                                // rank
  int interrupted_by = 0;                                // signal
  Clock::time_point stop_at = Clock::time_point::max();  // then SIGTERM, then SIGKILL
  int stop_stage = 0;
  auto signal_running = [&](int signal) {
    for (const Child& child : children) {
      if (child.running) ::kill(child.pid, signal);
    }
  };
  auto running = [&] {
    for (const Child& child : children) {
      if (child.running) return true;
    }
    return false;
  };
  Clock::time_point drained_by = Clock::time_point::max();
  for (;;) {
    std::vector<pollfd> fds = {{signal_pipe[0], POLLIN, 0}};
    for (const PrefixedOutput& output : outputs) {
      if (output.open()) fds.push_back({output.source(), POLLIN, 0});
    }
    if (fds.size() == 1 && !running()) break;
    if (!running() && Clock::now() >= drained_by) break;  // a grandchild keeps a pipe open
    ::poll(fds.data(), fds.size(), 100);
    if (fds[0].revents & POLLIN) {
      char signal = 0;
      while (::read(signal_pipe[0], &signal, 1) == 1) {
        if (interrupted_by != 0) {
          signal_running(SIGKILL);  // a second Ctrl-C does not wait
        } else {
          interrupted_by = signal;
          signal_running(signal);
          stop_at = Clock::now() + grace;
          stop_stage = 1;
        }
      }
    }
    for (PrefixedOutput& output : outputs) {
      if (!output.open()) continue;
      for (const pollfd& entry : fds) {
        if (entry.fd == output.source() && (entry.revents & (POLLIN | POLLHUP | POLLERR))) {
          output.pump();
          break;
        }
      }
    }
    for (Child& child : children) {
      if (!child.running) continue;
      int status = 0;
      if (::waitpid(child.pid, &status, WNOHANG) != child.pid) continue;
      child.running = false;
      child.status = status;
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (failed && first_failure < 0 && interrupted_by == 0) {
        first_failure = child.rank;
        stop_at = Clock::now() + grace;
        stop_stage = 1;
      }
      if (!running()) drained_by = Clock::now() + std::chrono::seconds(1);
    }
    if (stop_stage > 0 && Clock::now() >= stop_at && running()) {
      if (stop_stage == 1) {
        signal_running(SIGTERM);
        signal_running(SIGCONT);  // a stopped rank acts on SIGTERM only once continued
      } else {
        signal_running(SIGKILL);
      }
      stop_at = Clock::now() + std::chrono::seconds(2);
      stop_stage = 2;
    }
  }
  for (const PrefixedOutput& output : outputs) {
    if (output.open()) ::close(output.source());
  }
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) ::signal(signal, SIG_DFL);
  ::close(signal_pipe[0]);
  ::close(signal_pipe[1]);

  if (interrupted_by != 0) {
    say(std::string("interrupted by ") + ::strsignal(interrupted_by) + "; stopped " +
        std::to_string(world_size) + (world_size == 1 ? " rank" : " ranks"));
    return 128 + interrupted_by;
  }
  if (first_failure >= 0) {
    const Child& failed = children[static_cast<size_t>(first_failure)];
    std::string others;
    for (const Child& child : children) {
      if (child.rank == failed.rank) continue;
      others += (others.empty() ? "" : "; ") + std::string("rank ") + std::to_string(child.rank) +
                " " + status_text(child.status);
    }
    say(blame(outputs, failed.rank) + "rank " + std::to_string(failed.rank) + " " +
        status_text(failed.status) +
        (plans.empty() ? "" : " (" + plans[static_cast<size_t>(failed.rank)] + ")") +
        (others.empty() ? "" : "; then " + others));
    return 1;
  }
  if (traces) say(traces->merge(world_size));
  return 0;
}

}  // namespace piper::engine
