#include "formats/cluster.h"

#include <cstdio>

#include "formats/atomic_file.h"
#include "formats/error.h"
#include "formats/strategy.h"
#include "formats/strategy_reader.h"

namespace piper::formats {
namespace {

using strategy::reader::Context;
using strategy::reader::json;
using strategy::reader::Object;
using strategy::reader::Range;

constexpr Range kPositive{.min = 0, .min_open = true};
constexpr Range kNonNegative{};

Link read_link(const Object& top, const char* key) {
  const Object link(top.ctx(), *top.find(key), top.at(key), {"bandwidth", "latency"},
                    {"bandwidth", "latency"});
  return {.bandwidth = *link.number("bandwidth", kPositive),
          .latency = *link.number("latency", kNonNegative)};
}

// "450 GB/s, 3 us".
std::string link_text(const Link& link) {
  char text[64];
  std::snprintf(text, sizeof text, "%g GB/s, %g us", link.bandwidth / 1e9, link.latency * 1e6);
  return text;
}

}  // namespace

void Cluster::check() const {
  const auto positive = [](double value, const char* what) {
    if (!(value > 0)) throw Error(std::string(what) + " must be more than 0");
  };
  const auto non_negative = [](double value, const char* what) {
    if (!(value >= 0)) throw Error(std::string(what) + " must be 0 or more");
  };
  positive(flops, "the FLOP rate");
  positive(bfloat16_flops, "the bfloat16 FLOP rate");
  positive(memory_bandwidth, "the memory bandwidth");
  positive(intra_node.bandwidth, "the link bandwidth");
  positive(inter_node.bandwidth, "the inter-node link bandwidth");
  non_negative(intra_node.latency, "the link latency");
  non_negative(inter_node.latency, "the inter-node link latency");
  non_negative(op_overhead, "the per-op overhead");
  non_negative(memory_bytes, "the device memory");
  non_negative(static_cast<double>(devices_per_node), "the devices per node");
}

std::string Cluster::describe() const {
  char text[256];
  std::string out;
  if (bfloat16_flops == flops) {
    std::snprintf(text, sizeof text, "%g GFLOP/s", flops / 1e9);
  } else {
    std::snprintf(text, sizeof text, "%g GFLOP/s float32, %g bfloat16", flops / 1e9,
                  bfloat16_flops / 1e9);
  }
  out += text;
  std::snprintf(text, sizeof text, ", %g GB/s memory", memory_bandwidth / 1e9);
  out += text;
  if (memory_bytes > 0) {
    std::snprintf(text, sizeof text, " (%g GB per device)", memory_bytes / 1e9);
    out += text;
  }
  if (devices_per_node == 0) {
    std::snprintf(text, sizeof text, ", %g GB/s link, %g us latency", intra_node.bandwidth / 1e9,
                  intra_node.latency * 1e6);
    out += text;
  } else {
    out += ", " + std::to_string(devices_per_node) + " devices per node (" + link_text(intra_node) +
           " within a node, " + link_text(inter_node) + " across nodes)";
  }
  std::snprintf(text, sizeof text, ", %g us per op", op_overhead * 1e6);
  out += text;
  if (!measured.empty()) {
    out += "; measured: " + std::to_string(measured.kernels.size()) + " kernels, ";
    if (!measured.products.empty()) {
      out += std::to_string(measured.products.size()) + " products grids, ";
    }
    out += std::to_string(measured.collectives.size()) + " collectives (" + measured.on + ")";
  }
  return out;
}

bool Cluster::within_node(const std::vector<int>& ranks) const {
  if (devices_per_node <= 0 || ranks.empty()) return true;
  const int64_t node = ranks.front() / devices_per_node;
  for (int rank : ranks) {
    if (rank / devices_per_node != node) return false;
  }
  return true;
}

const Link& Cluster::link(const std::vector<int>& ranks) const {
  return within_node(ranks) ? intra_node : inter_node;
}

Cluster parse_cluster(const std::string& text, const std::string& source) {
  const Context ctx(source);
  const json root = strategy::parse_json_text(text, source);
  const std::vector<std::string_view> required = {"devices_per_node", "flops",      "memory_bytes",
                                                  "memory_bandwidth", "intra_node", "inter_node",
                                                  "kernel_overhead"};
  std::vector<std::string_view> keys = required;
  keys.push_back("measured");
  const Object top(ctx, root, "$", keys, required);
  const Object flops(ctx, *top.find("flops"), top.at("flops"), {"float32", "bfloat16"},
                     {"float32", "bfloat16"});
  Cluster cluster;
  cluster.devices_per_node = *top.integer("devices_per_node", 1, 65536);
  cluster.flops = *flops.number("float32", kPositive);
  cluster.bfloat16_flops = *flops.number("bfloat16", kPositive);
  cluster.memory_bytes = *top.number("memory_bytes", kPositive);
  cluster.memory_bandwidth = *top.number("memory_bandwidth", kPositive);
  cluster.intra_node = read_link(top, "intra_node");
  cluster.inter_node = read_link(top, "inter_node");
  cluster.op_overhead = *top.number("kernel_overhead", kNonNegative);
  if (top.find("measured") != nullptr) cluster.measured = read_measured_costs(top);
  return cluster;
}

std::string cluster_json(const Cluster& cluster) {
  cluster.check();
  if (cluster.devices_per_node < 1 || !(cluster.memory_bytes > 0)) {
    throw Error("a cluster file describes the devices per node and their memory; got " +
                std::to_string(cluster.devices_per_node) + " devices per node and " +
                std::to_string(cluster.memory_bytes) + " bytes");
  }
  const auto link = [](const Link& link) {
    return json{{"bandwidth", link.bandwidth}, {"latency", link.latency}};
  };
  json file = {{"devices_per_node", cluster.devices_per_node},
               {"flops", {{"float32", cluster.flops}, {"bfloat16", cluster.bfloat16_flops}}},
               {"memory_bytes", cluster.memory_bytes},
               {"memory_bandwidth", cluster.memory_bandwidth},
               {"intra_node", link(cluster.intra_node)},
               {"inter_node", link(cluster.inter_node)},
               {"kernel_overhead", cluster.op_overhead}};
  std::string text = file.dump(2);
  if (!cluster.measured.empty()) {
    // The measured object goes last, nested one level: its own lines indented by two.
    std::string measured = measured_costs_text(cluster.measured);
    for (size_t at = measured.find('\n'); at != std::string::npos;
         at = measured.find('\n', at + 3)) {
      measured.replace(at, 1, "\n  ");
    }
    text.replace(text.size() - 2, 2, ",\n  \"measured\": " + measured + "\n}");
  }
  return text + "\n";
}

Cluster load_cluster(const std::string& path) { return parse_cluster(read_file(path), path); }

}  // namespace piper::formats
