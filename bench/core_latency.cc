// piper-core-latency: the round trip of a cache line between two cores, two threads pinned to
// them passing a flag back and forth. On a VM it tells whether the two vCPUs run close (sharing
// a last-level cache: tens of nanoseconds) or far apart (hundreds), which a hypervisor can
// change from minute to minute and which moves a multi-threaded CPU rank's step by 10-15%
// (bench/README.md, cost_profile.py). A benchmark: nothing asserts a time.
#include <pthread.h>
#include <sched.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// Nanoseconds per round trip over `trips` passes of the flag between `first` and `second`.
double round_trip_ns(int first, int second, int trips) {
  alignas(64) std::atomic<int> flag{0};
  std::atomic<bool> pinned{true};
  std::thread echo([&] {
    if (!pin_to(second)) pinned = false;
    for (int i = 0; i < trips; ++i) {
      while (flag.load(std::memory_order_acquire) != 1) {
      }
      flag.store(0, std::memory_order_release);
    }
  });
  if (!pin_to(first)) pinned = false;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < trips; ++i) {
    flag.store(1, std::memory_order_release);
    while (flag.load(std::memory_order_acquire) != 0) {
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  echo.join();
  if (!pinned) {
    std::fprintf(stderr, "piper-core-latency: cannot pin a thread to CPU %d or %d\n", first,
                 second);
    std::exit(1);
  }
  return seconds * 1e9 / trips;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> cpus;
  int rounds = 5;
  CLI::App app{"Round trip of a cache line between two cores, in nanoseconds"};
  app.add_option("--cpus", cpus, "the two CPUs (default: the first two this process may use)")
      ->expected(2);
  app.add_option("--rounds", rounds, "rounds of 100000 trips; the median counts")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (cpus.empty()) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
      std::perror("piper-core-latency: sched_getaffinity");
      return 1;
    }
    for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < 2; ++cpu) {
      if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
    }
    if (cpus.size() < 2) {
      std::fprintf(stderr, "piper-core-latency: this process may run on one CPU only\n");
      return 1;
    }
  }
  std::vector<double> trips;
  for (int round = 0; round < rounds; ++round) {
    trips.push_back(round_trip_ns(cpus[0], cpus[1], 100000));
  }
  std::sort(trips.begin(), trips.end());
  std::printf("round trip between CPU %d and CPU %d: %.0f ns (median of %d rounds)\n", cpus[0],
              cpus[1], trips[trips.size() / 2], rounds);
}
