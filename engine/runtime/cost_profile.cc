#include "engine/runtime/cost_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <ostream>
#include <vector>

#include "engine/comm/launch_environment.h"
#include "engine/comm/rendezvous.h"
#include "engine/cpu/parallel.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/profile_kernels.h"
#include "formats/atomic_file.h"
#include "formats/cluster.h"
#include "formats/error.h"

namespace piper::engine {
namespace {

using Clock = std::chrono::steady_clock;
using formats::CollectiveKind;
using formats::MeasuredCurve;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

// How long each measurement runs.
struct Budget {
  double kernel_s;            // a kernel runs back to back for this long, per round
  double product_s;           // as kernel_s, for each shape of a products grid
  int rounds;                 // rounds per size; the median counts
  int max_repeats;            // of a collective per size (fewer for large ones)
  double largest_collective;  // bytes
  double copied_bytes;        // at least, in the copies a kernel's timing cycles through
  double settle_s;            // of several ranks: untimed calls before each timed run, seconds
};

// The device queue of a backend whose kernels run asynchronously (CUDA): wait() returns once
// the work issued so far is done. A no-op for the CPU.
class DeviceQueue {
 public:
  explicit DeviceQueue(Backend& backend) : streams_(backend.make_device_streams(1, 0)) {
    if (streams_) streams_->bind(0);
  }
  ~DeviceQueue() {
    if (!streams_) return;
    try {
      streams_->finish(0);
    } catch (const Error&) {
      // Only a device fault, which wait() reported already, or one met while unwinding.
    }
  }
  void wait() {
    if (!streams_) return;
    streams_->finish(0);
    streams_->bind(0);
  }

 private:
  std::unique_ptr<DeviceStreams> streams_;
};

// Device memory freed with the object.
class DeviceBuffer {
 public:
  DeviceBuffer(Backend& backend, size_t bytes)
      : backend_(backend), data_(backend.allocate(bytes)) {}
  ~DeviceBuffer() { backend_.release(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }

 private:
  Backend& backend_;
  void* data_;
};

// Values every kernel takes without failing: floats in [0.5, 1), int64 0 (a valid label), false
// (true above the diagonal of a causal mask).
std::vector<uint8_t> host_values(const ProfileTensor& tensor) {
  const auto elements = static_cast<size_t>(num_elements(tensor.shape));
  std::vector<uint8_t> bytes(elements * dtype_size(tensor.dtype), 0);
  if (tensor.causal) {
    const auto keys = static_cast<size_t>(tensor.shape.back());
    for (size_t i = 0; i < elements; ++i) bytes[i] = i % keys > i / keys % keys;
    return bytes;
  }
  for (size_t i = 0; i < elements; ++i) {
    const float value = 0.5f + static_cast<float>(i % 97) / 200.0f;
    if (tensor.dtype == plan::FLOAT32) {
      std::memcpy(bytes.data() + 4 * i, &value, 4);
    } else if (tensor.dtype == plan::BFLOAT16) {
      uint32_t bits = 0;
      std::memcpy(&bits, &value, 4);
      const auto upper = static_cast<uint16_t>(bits >> 16);
      std::memcpy(bytes.data() + 2 * i, &upper, 2);
    }
  }
  return bytes;
}

// Where this rank is and how it talks to the others: a Gloo group of every rank for barriers
// and for averaging, and the factory of the measured communicators.
struct Ranks {
  int rank = 0;
  int world_size = 1;
  std::unique_ptr<Rendezvous> rendezvous;
  std::unique_ptr<Communicator> control;      // every rank, Gloo; null for one rank
  std::unique_ptr<CommunicatorFactory> nccl;  // with --comm nccl
  CommunicatorFactory* measured = nullptr;    // the communicators collectives are timed on

  void barrier() {
    if (!control) return;
    float token = 0;
    control->all_reduce(&token, 1, false);
  }
  // The mean over the ranks of every rank's `value`.
  double mean(double value) {
    if (!control) return value;
    auto single = static_cast<float>(value);
    control->all_reduce(&single, 1, true);
    return single;
  }
};

// Copies of a kernel's tensors that the timing cycles through, so that each call reads operands
// that the last calls moved out of the small caches, as training's kernels mostly do: the step's
// other kernels have moved them since they were written. Timed on the same buffers again and
// again (hot in a core's L2), the benchmark model's products ran 10-25% faster than in its
// training trace. On a GPU the copies span at least kCopiedBytes, within its L2 (50-60 MiB on an
// H100/H200).
constexpr double kCopiedBytes = 8.0 * 1024 * 1024;
// A CPU rank's step moves much more than the last-level cache through it (weights, activations
// kept for the backward), and a rank of several threads reads operands on other cores than the
// ones that wrote them, so on a CPU the copies span past the L3 and calls read from memory. On
// the benchmark VM (16 MiB of L3), copies of 128 MiB plan one rank at 2 threads 2-6% short and
// two ranks at 1 thread within 6%; through 8 MiB, two ZeRO-2 replicas were planned 9% short,
// their forward 4-7% short in a trace, and one rank at 2 threads 7-15% short.
constexpr double kCopiedBytesOnCpu = 128.0 * 1024 * 1024;
constexpr size_t kMaxCopies = 256;  // small kernels stay within this many

// An instance's tensors in device memory, filled with host_values, in copies, and a prepared
// kernel on each copy.
struct PlacedKernel {
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<std::unique_ptr<PreparedKernel>> copies;
};

size_t copies_of(const ProfileKernel& instance, double copied_bytes) {
  double bytes = 0;
  for (const auto* tensors : {&instance.inputs, &instance.outputs}) {
    for (const ProfileTensor& tensor : *tensors) {
      bytes += static_cast<double>(num_elements(tensor.shape) * dtype_size(tensor.dtype));
    }
  }
  return std::clamp<size_t>(static_cast<size_t>(std::ceil(copied_bytes / std::max(bytes, 1.0))), 1,
                            kMaxCopies);
}

// Throws what backend.prepare throws for a kernel the backend does not have.
PlacedKernel place(const ProfileKernel& instance, Backend& backend, const Budget& budget) {
  std::vector<std::vector<uint8_t>> inputs, outputs;  // host values
  for (const ProfileTensor& tensor : instance.inputs) inputs.push_back(host_values(tensor));
  for (const ProfileTensor& tensor : instance.outputs) outputs.push_back(host_values(tensor));
  PlacedKernel placed;
  const auto place_all = [&](const std::vector<ProfileTensor>& tensors,
                             const std::vector<std::vector<uint8_t>>& values) {
    std::vector<TensorView> views;
    for (size_t i = 0; i < tensors.size(); ++i) {
      placed.buffers.push_back(std::make_unique<DeviceBuffer>(backend, values[i].size()));
      backend.upload(placed.buffers.back()->data(), values[i].data(), values[i].size());
      views.push_back({placed.buffers.back()->data(), tensors[i].dtype, tensors[i].shape});
    }
    return views;
  };
  for (size_t copy = copies_of(instance, budget.copied_bytes); copy > 0; --copy) {
    const std::vector<TensorView> in = place_all(instance.inputs, inputs);
    std::vector<TensorView> out = place_all(instance.outputs, outputs);
    if (instance.view) out[0].data = in[0].data;
    placed.copies.push_back(backend.prepare(instance.kernel, in, out));
  }
  return placed;
}

// Seconds per call of `kernel`'s copies, called in turn, back to back for `seconds`.
double calls_for(PlacedKernel& kernel, const StepContext& context, DeviceQueue& queue,
                 double seconds) {
  const size_t copies = kernel.copies.size();
  size_t calls = 0;
  size_t batch = 1;
  const Clock::time_point start = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (size_t i = 0; i < batch; ++i) kernel.copies[(calls + i) % copies]->run(context);
    queue.wait();
    calls += batch;
    batch = std::min<size_t>(batch * 2, 1024);
    elapsed = seconds_since(start);
  }
  return elapsed / static_cast<double>(calls);
}

// Seconds one call of a kernel takes, the median over rounds.
struct KernelSeconds {
  double together = 0;  // every rank running its own calls at the same time: their mean
  double alone = 0;     // on rank 0 while the others wait; 0 with one rank
};

// Rounds alternate between the two, so that both see the machine in the same state.
KernelSeconds time_kernel(PlacedKernel& kernel, DeviceQueue& queue, Ranks& ranks,
                          const Budget& budget) {
  const StepContext context;
  // Warm: first touch of the memory, lazily built tables.
  for (const auto& copy : kernel.copies) copy->run(context);
  queue.wait();
  // Ranks leaving a barrier run their first milliseconds slower than in a step's steady state
  // (Linux may first run a woken rank on its waker's core; a VM's idle vCPU wakes slowly). On
  // the benchmark VM two ranks timing products at once without settling took 11-15% longer
  // than alone (the grid's median), 6-10% pinned to a core each, and 0-5% settled. Two ranks
  // training at once run a step's kernels as fast as one rank alone (profiles/README.md).
  const auto timed = [&] {
    if (ranks.world_size > 1) calls_for(kernel, context, queue, budget.settle_s);
    return calls_for(kernel, context, queue, budget.kernel_s);
  };
  std::vector<double> together, alone;
  for (int round = 0; round < budget.rounds; ++round) {
    ranks.barrier();
    together.push_back(timed());
    if (ranks.world_size == 1) continue;
    ranks.barrier();
    if (ranks.rank == 0) alone.push_back(timed());
    ranks.barrier();  // the others wait here, idle
  }
  KernelSeconds seconds{ranks.mean(median(together)), 0};
  // A rank never runs slower for its neighbours idling: a longer time alone is noise.
  if (!alone.empty()) seconds.alone = std::min(median(alone), seconds.together);
  return seconds;
}

// The family's curve, or nullopt when the backend has no such kernel (said on `out`).
std::optional<formats::MeasuredKernel> profile_family(const ProfileFamily& family, Backend& backend,
                                                      DeviceQueue& queue, Ranks& ranks,
                                                      const Budget& budget, std::ostream& out) {
  formats::MeasuredKernel measured{family.op_type, family.dtype, family.key, {}, {}};
  for (int64_t scale : family.scales) {
    const ProfileKernel instance = family.make(scale);
    // Small scales of row kernels round up to one whole row: the same instance again.
    const double size = profile_size(family, instance);
    if (!measured.curve.points.empty() && size <= measured.curve.points.back().first) continue;
    PlacedKernel placed;
    try {
      placed = place(instance, backend, budget);
    } catch (const Error& error) {
      // Every rank runs the same backend, so every rank skips the same families.
      if (!measured.curve.points.empty()) throw;
      if (ranks.rank == 0) {
        out << family.op_type << " " << family.dtype << ": not measured (" << error.what() << ")\n";
      }
      return std::nullopt;
    }
    const KernelSeconds seconds = time_kernel(placed, queue, ranks, budget);
    measured.curve.points.emplace_back(size, seconds.together);
    if (seconds.alone > 0) measured.alone.push_back(seconds.alone);
  }
  if (ranks.rank == 0) {
    const auto& [first_size, first_s] = measured.curve.points.front();
    const auto& [last_size, last_s] = measured.curve.points.back();
    const bool flops = family.key == formats::CostKey::kFlops;
    char line[256];
    std::snprintf(line, sizeof line, "%s %s: %.1f us at %.3g %s .. %.3g %s/s at %.3g %s\n",
                  family.op_type.c_str(), family.dtype.c_str(), first_s * 1e6, first_size,
                  flops ? "FLOP" : "B", last_size / last_s / 1e9, flops ? "GFLOP" : "GB", last_size,
                  flops ? "FLOP" : "B");
    out << line;
    if (!measured.alone.empty()) {
      std::snprintf(line, sizeof line, "  alone on the node: %.2f of that time at the largest\n",
                    measured.alone.back() / last_s);
      out << line;
    }
  }
  return measured;
}

// The grid's times, or nullopt when the backend has no such product (said on `out`).
std::optional<formats::MeasuredProducts> profile_products(const ProductGrid& grid, Backend& backend,
                                                          DeviceQueue& queue, Ranks& ranks,
                                                          const Budget& budget, std::ostream& out) {
  formats::MeasuredProducts measured{grid.dtype, {}, {}, {}};
  for (int64_t size : grid.sizes) measured.sizes.push_back(static_cast<double>(size));
  Budget each = budget;
  each.kernel_s = budget.product_s;
  double slowest = 0, fastest = 0;  // FLOP/s
  for (const std::string& layout : grid.layouts) {
    std::vector<double>& seconds = measured.seconds[layout];
    std::vector<double> alone;
    for (int64_t m : grid.sizes) {
      for (int64_t n : grid.sizes) {
        for (int64_t k : grid.sizes) {
          const ProfileKernel instance = product_kernel(grid, m, n, k, layout);
          PlacedKernel placed;
          try {
            placed = place(instance, backend, budget);
          } catch (const Error& error) {
            if (!seconds.empty()) throw;
            if (ranks.rank == 0) {
              out << "piper.MatMul " << grid.dtype << " by shape: not measured (" << error.what()
                  << ")\n";
            }
            return std::nullopt;
          }
          const KernelSeconds timed = time_kernel(placed, queue, ranks, each);
          seconds.push_back(timed.together);
          if (timed.alone > 0) alone.push_back(timed.alone);
          const double rate = instance.flops / seconds.back();
          slowest = slowest == 0 ? rate : std::min(slowest, rate);
          fastest = std::max(fastest, rate);
        }
      }
    }
    if (!alone.empty()) measured.alone[layout] = std::move(alone);
  }
  if (ranks.rank == 0) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "piper.MatMul %s by shape: %zu layouts of %zu shapes from %lld to %lld, %.3g .. "
                  "%.3g GFLOP/s\n",
                  grid.dtype.c_str(), grid.layouts.size(), measured.seconds.begin()->second.size(),
                  static_cast<long long>(grid.sizes.front()),
                  static_cast<long long>(grid.sizes.back()), slowest / 1e9, fastest / 1e9);
    out << line;
  }
  return measured;
}

// A buffer a communicator reads and writes: host memory or, for NCCL, the backend's.
class CommBuffer {
 public:
  CommBuffer(Backend& backend, bool host, size_t bytes) {
    if (host) {
      host_.assign(bytes, 1);
    } else {
      device_ = std::make_unique<DeviceBuffer>(backend, bytes);
    }
  }
  void* data() { return device_ ? device_->data() : host_.data(); }

 private:
  std::vector<uint8_t> host_;
  std::unique_ptr<DeviceBuffer> device_;
};

// One operation of `kind` over `bytes` (the collective's buffer) on member `group.rank()`.
void run_collective(Communicator& group, CollectiveKind kind, size_t bytes, CommBuffer& in,
                    CommBuffer& out, int tag) {
  const auto n = static_cast<size_t>(group.size());
  const size_t count = bytes / 4;
  switch (kind) {
    case CollectiveKind::kAllReduce:
      group.all_reduce(in.data(), count, ElementType::kFloat32, false);
      return;
    case CollectiveKind::kReduceScatter:
      group.reduce_scatter(in.data(), out.data(), count / n, ElementType::kFloat32, false);
      return;
    case CollectiveKind::kAllGather:
      group.all_gather(in.data(), out.data(), count / n, ElementType::kFloat32);
      return;
    case CollectiveKind::kAllToAll:
      group.all_to_all(in.data(), out.data(), bytes / n);
      return;
    case CollectiveKind::kBroadcast:
      group.broadcast(in.data(), bytes, 0);
      return;
    case CollectiveKind::kTransfer:  // a round trip between members 0 and 1
      if (group.rank() == 0) {
        group.send(in.data(), bytes, 1, tag);
        group.recv(out.data(), bytes, 1, tag);
      } else if (group.rank() == 1) {
        group.recv(out.data(), bytes, 0, tag);
        group.send(in.data(), bytes, 0, tag);
      }
      return;
  }
}

std::vector<size_t> collective_sizes(const Budget& budget) {
  std::vector<size_t> sizes;
  for (double bytes = 1024; bytes <= budget.largest_collective; bytes *= 4) {
    sizes.push_back(static_cast<size_t>(bytes));
  }
  return sizes;
}

// Every collective over the group of ranks [0, n): member 0's median time per operation.
std::vector<formats::MeasuredCollective> profile_group(int n, Backend& backend, DeviceQueue& queue,
                                                       Ranks& ranks, const Budget& budget,
                                                       std::ostream& out) {
  std::vector<formats::MeasuredCollective> measured;
  if (ranks.rank >= n) return measured;
  std::vector<int> members(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) members[static_cast<size_t>(r)] = r;
  std::unique_ptr<Communicator> group =
      ranks.measured->connect("piper/profile/group" + std::to_string(n), members);
  const std::vector<CollectiveKind> kinds =
      n == 2
          ? std::vector<CollectiveKind>{CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                        CollectiveKind::kAllGather, CollectiveKind::kAllToAll,
                                        CollectiveKind::kBroadcast, CollectiveKind::kTransfer}
          : std::vector<CollectiveKind>{CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                        CollectiveKind::kAllGather, CollectiveKind::kAllToAll,
                                        CollectiveKind::kBroadcast};
  int tag = 0;
  for (CollectiveKind kind : kinds) {
    formats::MeasuredCollective collective{kind, n, {}};
    for (size_t bytes : collective_sizes(budget)) {
      CommBuffer in(backend, group->host_buffers(), bytes);
      CommBuffer result(backend, group->host_buffers(), bytes);
      const int repeats =
          std::clamp(static_cast<int>(budget.largest_collective / bytes), 3, budget.max_repeats);
      run_collective(*group, kind, bytes, in, result, ++tag);  // warm: connections, buffers
      queue.wait();
      std::vector<double> times;
      for (int i = 0; i < repeats; ++i) {
        const Clock::time_point start = Clock::now();
        run_collective(*group, kind, bytes, in, result, ++tag);
        queue.wait();
        times.push_back(seconds_since(start));
      }
      // A transfer is half its round trip.
      const double seconds = median(times) / (kind == CollectiveKind::kTransfer ? 2 : 1);
      collective.curve.points.emplace_back(static_cast<double>(bytes), seconds);
    }
    if (ranks.rank == 0) {
      const auto& [first_bytes, first_s] = collective.curve.points.front();
      const auto& [last_bytes, last_s] = collective.curve.points.back();
      char line[256];
      std::snprintf(line, sizeof line, "%s over %d ranks: %.1f us at %.0f B .. %.3g ms at %.3g B\n",
                    formats::collective_name(kind), n, first_s * 1e6, first_bytes, last_s * 1e3,
                    last_bytes);
      out << line;
    }
    measured.push_back(std::move(collective));
  }
  return measured;
}

// The scalar rates from the curves: what piper-plan uses for kernels and groups they do not
// cover (the largest product's and Add's rates, the smallest Add's time as the per-kernel
// overhead, the 2-rank all-reduce's latency and ring bandwidth).
void fit_rates(formats::Cluster& cluster) {
  const formats::MeasuredCosts& measured = cluster.measured;
  const auto rate = [](const formats::MeasuredKernel* kernel) {
    const auto& [size, seconds] = kernel->curve.points.back();
    return size / seconds;
  };
  if (const auto* product = measured.kernel("piper.MatMul", "float32")) {
    cluster.flops = cluster.bfloat16_flops = rate(product);
  }
  if (const auto* product = measured.kernel("piper.MatMul", "bfloat16")) {
    cluster.bfloat16_flops = rate(product);
  }
  if (const auto* add = measured.kernel("Add", "float32")) {
    cluster.memory_bandwidth = rate(add);
    cluster.op_overhead = add->curve.points.front().second;
  }
  if (const auto* all_reduce = measured.collective(CollectiveKind::kAllReduce, 2)) {
    const auto& [first_bytes, first_s] = all_reduce->curve.points.front();
    const auto& [last_bytes, last_s] = all_reduce->curve.points.back();
    cluster.intra_node.latency = first_s;
    // A ring all-reduce over 2 ranks sends the buffer once: 2(n-1)/n = 1.
    cluster.intra_node.bandwidth = (last_bytes - first_bytes) / std::max(last_s - first_s, 1e-9);
    cluster.inter_node = cluster.intra_node;
  }
}

void connect_ranks(const CostProfileOptions& options, const std::string& comm, Backend& backend,
                   Ranks& ranks) {
  const LaunchEnvironment launch = read_launch_environment(options.rendezvous.value_or(""));
  ranks.world_size = launch.world_size.value_or(1);
  ranks.rank = launch.rank.value_or(0);
  if (ranks.world_size <= 1) return;
  if (!launch.rank || !launch.rendezvous) {
    throw Error("--profile-costs with " + std::to_string(ranks.world_size) + " ranks (" +
                launch.world_size_from +
                ") needs each rank's RANK and a rendezvous (--rendezvous, PIPER_RENDEZVOUS or "
                "MASTER_ADDR and MASTER_PORT); piper-launch --ranks N gives both");
  }
  RendezvousOptions meet;
  meet.url = *launch.rendezvous;
  meet.url_from = launch.rendezvous_from;
  meet.rank = ranks.rank;
  meet.world_size = ranks.world_size;
  meet.plan_id = "cost-profile";
  meet.plan_path = "--profile-costs " + options.path;
  meet.timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout_s * 1000));
  meet.token = launch.token;
  ranks.rendezvous = std::make_unique<Rendezvous>(meet);
  std::vector<int> everyone(static_cast<size_t>(ranks.world_size));
  for (int r = 0; r < ranks.world_size; ++r) everyone[static_cast<size_t>(r)] = r;
  ranks.control = ranks.rendezvous->communicators().connect("piper/profile/control", everyone);
  ranks.measured = &ranks.rendezvous->communicators();
  if (comm == "nccl") {
    ranks.nccl = make_nccl_communicators(backend, ranks.rendezvous->store(), ranks.rank,
                                         "piper/profile", meet.timeout);
    ranks.measured = ranks.nccl.get();
  }
}

}  // namespace

void profile_costs(const CostProfileOptions& options, std::ostream& out) {
  if (options.path.empty()) throw Error("--profile-costs needs the file to write");
  const std::string comm =
      options.comm.empty() ? default_communicator(options.device) : options.comm;
  if (comm == "nccl" && options.device != "cuda") {
    throw Error("--comm nccl works on GPU memory: it needs --device cuda, not --device " +
                options.device);
  }
  std::unique_ptr<Backend> backend = make_backend(options.device);
  Ranks ranks;
  connect_ranks(options, comm, *backend, ranks);
  const double copied_bytes = options.device == "cpu" ? kCopiedBytesOnCpu : kCopiedBytes;
  const Budget budget = options.quick
                            ? Budget{0.002, 0.002, 3, 3, 16384.0, copied_bytes, 0.002}
                            : Budget{0.03, 0.004, 5, 20, 64.0 * 1024 * 1024, copied_bytes, 0.004};
  std::string on = options.device;
  if (options.device == "cpu") {
    on += " (" + std::to_string(cpu::num_threads()) + " threads per rank)";
  }
  on += ", " + std::to_string(ranks.world_size) + (ranks.world_size == 1 ? " rank" : " ranks") +
        " at once";
  if (ranks.world_size > 1) on += ", " + comm;
  if (options.quick) on += ", quick";
  if (ranks.rank == 0) out << "profiling " << on << "\n";

  formats::Cluster cluster;
  cluster.measured.on = on;
  cluster.devices_per_node = ranks.world_size;
  cluster.memory_bytes = static_cast<double>(backend->memory_capacity());
  if (backend->host_memory()) cluster.memory_bytes /= ranks.world_size;
  {
    DeviceQueue queue(*backend);
    for (const ProfileFamily& family : profile_families(options.quick)) {
      if (auto measured = profile_family(family, *backend, queue, ranks, budget, out)) {
        cluster.measured.kernels.push_back(std::move(*measured));
      }
    }
    for (const ProductGrid& grid : product_grids(options.quick)) {
      if (auto measured = profile_products(grid, *backend, queue, ranks, budget, out)) {
        cluster.measured.products.push_back(std::move(*measured));
      }
    }
    std::vector<int> group_sizes;
    for (int n = 2; n <= ranks.world_size; n *= 2) group_sizes.push_back(n);
    if (ranks.world_size > 1 && group_sizes.back() != ranks.world_size) {
      group_sizes.push_back(ranks.world_size);
    }
    for (int n : group_sizes) {
      ranks.barrier();
      for (auto& collective : profile_group(n, *backend, queue, ranks, budget, out)) {
        cluster.measured.collectives.push_back(std::move(collective));
      }
    }
    ranks.barrier();
  }
  fit_rates(cluster);
  if (ranks.rank != 0) return;
  formats::write_file_atomically(options.path, formats::cluster_json(cluster));
  out << "wrote the profile to " << options.path << " (piper-plan --cluster " << options.path
      << "); cost model: " << cluster.describe() << "\n";
}

}  // namespace piper::engine
