// The cluster the cost model plans for (planner/sim, docs/cost-model.md): devices
// per node, FLOP rates per dtype, memory, intra- and inter-node links and the
// per-kernel overhead, and optionally the kernels and collectives measured on its
// devices (piper-run --profile-costs). piper-plan --cluster FILE reads it from JSON;
// without one, the defaults describe a small CPU machine, every device on one node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/measured_costs.h"

namespace piper::formats {

struct Link {
  double bandwidth = 1e9;  // bytes/s between two devices, per direction
  double latency = 20e-6;  // seconds each transfer or collective adds
};

// The defaults: OpenBLAS reaches ~200 GFLOP/s on two cores for large GEMMs, less for the
// samples' small ones; loopback TCP.
struct Cluster {
  int64_t devices_per_node = 0;  // ranks r / devices_per_node share a node; 0: one node
  double flops = 100e9;          // FLOP/s a float32 kernel reaches (every dtype but bfloat16)
  double bfloat16_flops = 100e9;
  double memory_bandwidth = 10e9;  // bytes/s a kernel reads plus writes
  double memory_bytes = 0;         // memory of one device; 0: not described
  Link intra_node;                 // between devices of one node (NVLink)
  Link inter_node;                 // between nodes (the network)
  double op_overhead = 2e-6;       // seconds each kernel adds (dispatch, launch)
  // Measured curves, which price what they cover instead of the rates above.
  MeasuredCosts measured;

  // Throws piper::Error naming the first rate that is not positive (the
  // latencies and overhead may be 0).
  void check() const;
  // "100 GFLOP/s, 10 GB/s memory, 1 GB/s link, 20 us latency, 2 us per op", and with measured
  // curves "; measured: 14 kernels, 6 collectives (cpu, 2 threads per rank, 1 rank)".
  std::string describe() const;
  // Whether every rank of a group is on one node.
  bool within_node(const std::vector<int>& ranks) const;
  // The slowest link a group of ranks spans: within a node when all share one.
  const Link& link(const std::vector<int>& ranks) const;
};

// Throws piper::Error naming `source` and the JSON path of what is wrong.
Cluster parse_cluster(const std::string& text, const std::string& source);
Cluster load_cluster(const std::string& path);
// The cluster file parse_cluster reads back; throws piper::Error when devices_per_node or
// memory_bytes is not described (0), which the file cannot say.
std::string cluster_json(const Cluster& cluster);

}  // namespace piper::formats
