// The cluster file (formats/cluster.h, docs/cost-model.md): every field read, and damaged
// files refused naming the file and the JSON path.
#include "formats/cluster.h"

#include <gtest/gtest.h>

#include <string>

#include "formats/error.h"

namespace piper::formats {
namespace {

const std::string kH100 = R"({
  "devices_per_node": 8,
  "flops": {"float32": 67e12, "bfloat16": 989e12},
  "memory_bytes": 80e9,
  "memory_bandwidth": 3.35e12,
  "intra_node": {"bandwidth": 450e9, "latency": 3e-6},
  "inter_node": {"bandwidth": 50e9, "latency": 10e-6},
  "kernel_overhead": 4e-6
})";

// kH100 with `from` replaced by `to` (which must occur once).
std::string edited(const std::string& from, const std::string& to) {
  std::string text = kH100;
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

std::string error_of(const std::string& text) {
  try {
    parse_cluster(text, "h100.json");
  } catch (const Error& error) {
    return error.what();
  }
  return "(accepted)";
}

TEST(ClusterFile, ReadsEveryField) {
  const Cluster cluster = parse_cluster(kH100, "h100.json");
  EXPECT_EQ(cluster.devices_per_node, 8);
  EXPECT_DOUBLE_EQ(cluster.flops, 67e12);
  EXPECT_DOUBLE_EQ(cluster.bfloat16_flops, 989e12);
  EXPECT_DOUBLE_EQ(cluster.memory_bytes, 80e9);
  EXPECT_DOUBLE_EQ(cluster.memory_bandwidth, 3.35e12);
  EXPECT_DOUBLE_EQ(cluster.intra_node.bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(cluster.intra_node.latency, 3e-6);
  EXPECT_DOUBLE_EQ(cluster.inter_node.bandwidth, 50e9);
  EXPECT_DOUBLE_EQ(cluster.inter_node.latency, 10e-6);
  EXPECT_DOUBLE_EQ(cluster.op_overhead, 4e-6);
  EXPECT_NO_THROW(cluster.check());
  EXPECT_EQ(cluster.describe(),
            "67000 GFLOP/s float32, 989000 bfloat16, 3350 GB/s memory (80 GB per device), 8 "
            "devices per node (450 GB/s, 3 us within a node, 50 GB/s, 10 us across nodes), 4 us "
            "per op");
}

TEST(ClusterFile, PicksTheLinkByNode) {
  const Cluster cluster = parse_cluster(kH100, "h100.json");
  EXPECT_EQ(&cluster.link({0, 7}), &cluster.intra_node);
  EXPECT_EQ(&cluster.link({8, 9, 15}), &cluster.intra_node);
  EXPECT_EQ(&cluster.link({7, 8}), &cluster.inter_node);
  EXPECT_EQ(&cluster.link({0, 1, 2, 3, 4, 5, 6, 7, 8}), &cluster.inter_node);
  const Cluster one_node;  // without a file: every rank on one node
  EXPECT_EQ(&one_node.link({0, 100}), &one_node.intra_node);
}

TEST(ClusterFile, RefusesDamagedFilesNamingThePath) {
  EXPECT_EQ(error_of(edited("\"devices_per_node\": 8", "\"devices_per_node\": 0")),
            "h100.json: $.devices_per_node: expected an integer from 1 to 65536, got 0");
  EXPECT_NE(error_of(edited("\"bandwidth\": 50e9", "\"bandwidth\": -1"))
                .find("h100.json: $.inter_node.bandwidth: expected a number > 0, got -1"),
            std::string::npos);
  EXPECT_NE(error_of(edited("\"bfloat16\": 989e12", "\"bf16\": 989e12"))
                .find("h100.json: $.flops.bf16: unknown key"),
            std::string::npos);
  EXPECT_NE(error_of(edited("\"kernel_overhead\": 4e-6", "\"kernel_overhead\": \"4us\""))
                .find("h100.json: $.kernel_overhead: expected a number >= 0"),
            std::string::npos);
  EXPECT_NE(error_of(edited("  \"memory_bytes\": 80e9,\n", ""))
                .find("h100.json: $: missing required key \"memory_bytes\""),
            std::string::npos);
  EXPECT_NE(error_of(edited("\"latency\": 3e-6}", "\"latency\": 3e-6")).find("h100.json:"),
            std::string::npos);  // a syntax error, placed in the file
  EXPECT_NE(error_of("[]").find("h100.json: $: expected"), std::string::npos);
}

TEST(ClusterFile, LoadNamesAMissingFile) {
  try {
    load_cluster("/nonexistent/cluster.json");
    FAIL() << "a missing file was read";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/cluster.json"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace piper::formats
