// The cluster file (formats/cluster.h, docs/cost-model.md): every field read, and damaged
// files refused naming the file and the JSON path.
#include "formats/cluster.h"

#include <gtest/gtest.h>

#include <cmath>
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

const std::string kMeasured = R"(,
  "measured": {
    "on": "cpu (2 threads per rank), 2 ranks at once, gloo",
    "kernels": [{"op": "piper.MatMul", "dtype": "float32", "by": "flops",
                 "points": [[1e6, 1e-5], [1e9, 1e-2]]},
                {"op": "Add", "dtype": "float32", "by": "bytes", "points": [[3072, 2e-6]]}],
    "products": [{"dtype": "float32", "sizes": [16, 256],
                  "seconds": {"nn": [1e-6, 2e-6, 3e-6, 4e-6, 5e-6, 6e-6, 7e-6, 8e-6],
                              "tn": [1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-3]}}],
    "collectives": [{"kind": "all_reduce", "ranks": 2, "points": [[1024, 1e-4], [4096, 4e-4]]}]
  }
})";

// kH100 with the measured section above.
std::string measured(const std::string& from = "", const std::string& to = "") {
  std::string text = kH100.substr(0, kH100.rfind('}') - 1) + kMeasured;
  if (!from.empty()) text.replace(text.find(from), from.size(), to);
  return text;
}

TEST(ClusterFile, ReadsMeasuredCurves) {
  const Cluster cluster = parse_cluster(measured(), "h100.json");
  ASSERT_EQ(cluster.measured.kernels.size(), 2u);
  const MeasuredKernel* product = cluster.measured.kernel("piper.MatMul", "float32");
  ASSERT_NE(product, nullptr);
  EXPECT_EQ(product->key, CostKey::kFlops);
  EXPECT_EQ(cluster.measured.kernel("piper.MatMul", "bfloat16"), nullptr);
  EXPECT_EQ(cluster.measured.on, "cpu (2 threads per rank), 2 ranks at once, gloo");
  ASSERT_NE(cluster.measured.collective(CollectiveKind::kAllReduce, 2), nullptr);
  EXPECT_EQ(cluster.measured.collective(CollectiveKind::kAllReduce, 4), nullptr);
  EXPECT_NE(cluster.describe().find("; measured: 2 kernels, 1 products grids, 1 collectives (cpu"),
            std::string::npos);
  const MeasuredProducts* products = cluster.measured.products_in("float32");
  ASSERT_NE(products, nullptr);
  EXPECT_EQ(products->sizes, (std::vector<double>{16, 256}));
  EXPECT_EQ(products->seconds.size(), 2u);
  EXPECT_EQ(cluster.measured.products_in("bfloat16"), nullptr);
  // Written and read back, the same curves.
  const Cluster again = parse_cluster(cluster_json(cluster), "written.json");
  EXPECT_EQ(again.measured.kernels[0].curve.points, product->curve.points);
  EXPECT_EQ(again.measured.collectives[0].curve.points,
            cluster.measured.collectives[0].curve.points);
  EXPECT_EQ(again.measured.products[0].seconds, products->seconds);
  EXPECT_DOUBLE_EQ(again.inter_node.bandwidth, 50e9);
}

// A profile taken by two ranks: the product curve and the grid also timed on one rank alone.
std::string measured_alone() {
  std::string text =
      measured("[[1e6, 1e-5], [1e9, 1e-2]]", "[[1e6, 1e-5], [1e9, 1e-2]], \"alone\": [1e-5, 5e-3]");
  const std::string grid = "1e-6, 1e-6, 1e-3]}";
  return text.replace(text.find(grid), grid.size(),
                      "1e-6, 1e-6, 1e-3]},\n \"alone\": {\"nn\": [1, 2, 3, 4, 5, 6, 7, 8], "
                      "\"tn\": [1, 1, 1, 1, 1, 1, 1, 9]}");
}

TEST(ClusterFile, ReadsTimesAloneOnTheNode) {
  const Cluster cluster = parse_cluster(measured_alone(), "h100.json");
  ASSERT_TRUE(cluster.measured.has_alone());
  EXPECT_FALSE(parse_cluster(measured(), "h100.json").measured.has_alone());
  EXPECT_EQ(cluster.measured.kernel("piper.MatMul", "float32")->alone,
            (std::vector<double>{1e-5, 5e-3}));
  EXPECT_TRUE(cluster.measured.kernel("Add", "float32")->alone.empty());
  // Alone on the node, the times alone stand in for the curves' where measured.
  const MeasuredCosts alone = cluster.measured.alone_on_node();
  EXPECT_DOUBLE_EQ(alone.kernel("piper.MatMul", "float32")->curve.seconds(1e9), 5e-3);
  EXPECT_DOUBLE_EQ(alone.kernel("Add", "float32")->curve.seconds(3072), 2e-6);
  EXPECT_DOUBLE_EQ(alone.products_in("float32")->product_seconds(256, 256, 256, "tn"), 9);
  EXPECT_DOUBLE_EQ(alone.products_in("float32")->product_seconds(16, 16, 16, "nn"), 1);
  // Written and read back, the same times alone.
  const Cluster again = parse_cluster(cluster_json(cluster), "written.json");
  EXPECT_EQ(again.measured.kernels[0].alone, cluster.measured.kernels[0].alone);
  EXPECT_EQ(again.measured.products[0].alone, cluster.measured.products[0].alone);
}

TEST(ClusterFile, RefusesTimesAloneThatDoNotMatchTheirCurve) {
  const auto with = [](const std::string& from, const std::string& to) {
    std::string text = measured_alone();
    return text.replace(text.find(from), from.size(), to);
  };
  EXPECT_EQ(error_of(with("[1e-5, 5e-3]", "[1e-5]")),
            "h100.json: $.measured.kernels[0].alone: expected 2 seconds (one per point), got 1");
  EXPECT_EQ(error_of(with("[1e-5, 5e-3]", "[1e-5, -1]")),
            "h100.json: $.measured.kernels[0].alone[1]: expected a number > 0, got -1");
  EXPECT_EQ(
      error_of(with(", \"tn\": [1, 1, 1, 1, 1, 1, 1, 9]", "")),
      "h100.json: $.measured.products[0].alone: expected the layouts of \"seconds\" (nn, tn), "
      "got 1 of them");
  EXPECT_EQ(error_of(with("\"tn\": [1, 1,", "\"nt\": [1, 1,")),
            "h100.json: $.measured.products[0].alone.nt: unknown key; expected one of nn, tn");
}

TEST(ClusterFile, InterpolatesCurvesAsPowerLaws) {
  const MeasuredCurve curve{{{1e3, 1e-6}, {1e5, 1e-4}, {1e6, 2e-4}}};
  EXPECT_DOUBLE_EQ(curve.seconds(10), 1e-6);     // below the first point: its time
  EXPECT_NEAR(curve.seconds(1e4), 1e-5, 1e-18);  // exponent 1 between the first two
  EXPECT_DOUBLE_EQ(curve.seconds(1e5), 1e-4);
  EXPECT_NEAR(curve.seconds(1e5 * std::sqrt(10.0)), 1e-4 * std::pow(2.0, 0.5), 1e-15);
  EXPECT_DOUBLE_EQ(curve.seconds(4e6), 8e-4);  // beyond the last: at its rate
}

TEST(ClusterFile, InterpolatesProductsAsPowerLawsInEachSize) {
  // seconds = m * n * k * 1e-9 on sizes 16, 64, 256, except "tn" at m = n = k = 256.
  MeasuredProducts grid{"float32", {16, 64, 256}, {}, {}};
  for (double m : grid.sizes) {
    for (double n : grid.sizes) {
      for (double k : grid.sizes) grid.seconds["nn"].push_back(m * n * k * 1e-9);
    }
  }
  grid.seconds["tn"] = grid.seconds["nn"];
  grid.seconds["tn"].back() = 1;
  EXPECT_DOUBLE_EQ(grid.product_seconds(64, 16, 256, "nn"), 64 * 16 * 256 * 1e-9);
  EXPECT_NEAR(grid.product_seconds(32, 100, 200, "nn"), 32 * 100 * 200 * 1e-9, 1e-15);
  EXPECT_NEAR(grid.product_seconds(32, 100, 200, "nt"), 32 * 100 * 200 * 1e-9, 1e-15);  // as nn
  EXPECT_NEAR(grid.product_seconds(256, 256, 256, "tn"), 1, 1e-12);
  // Below the grid: the first size's time; above it: in proportion, in every size at once.
  EXPECT_NEAR(grid.product_seconds(2, 1, 16, "nn"), 16 * 16 * 16 * 1e-9, 1e-15);
  EXPECT_NEAR(grid.product_seconds(1024, 512, 64, "nn"), 1024 * 512 * 64 * 1e-9, 1e-15);
  // A grid of one size: that product's time, in proportion above it.
  const MeasuredProducts one{"float32", {64}, {{"nn", {2e-4}}}, {}};
  EXPECT_NEAR(one.product_seconds(8, 64, 64, "tn"), 2e-4, 1e-15);
  EXPECT_NEAR(one.product_seconds(128, 64, 64, "nn"), 4e-4, 1e-15);
}

TEST(ClusterFile, RefusesBadProductsGridsNamingTheirPath) {
  EXPECT_EQ(error_of(measured("[16, 256]", "[256, 16]")),
            "h100.json: $.measured.products[0].sizes[1]: sizes must increase: 16 follows 256");
  EXPECT_EQ(error_of(measured("1e-6, 1e-6, 1e-3]", "1e-6, 1e-3]")),
            "h100.json: $.measured.products[0].seconds.tn: expected 8 seconds (one per [m, n, k] "
            "of the sizes), got 7");
  EXPECT_EQ(error_of(measured("\"tn\": [1e-6", "\"tn\": [0")),
            "h100.json: $.measured.products[0].seconds.tn[0]: expected a number > 0, got 0");
  EXPECT_EQ(error_of(measured("\"nn\": [1e-6", "\"tt\": [1e-6")),
            "h100.json: $.measured.products[0].seconds: missing required key \"nn\"");
  EXPECT_EQ(error_of(measured("\"tn\"", "\"at\"")),
            "h100.json: $.measured.products[0].seconds.at: unknown key; expected one of nn, nt, "
            "tn, tt");
}

TEST(ClusterFile, RefusesBadCurvesNamingTheirPath) {
  EXPECT_EQ(error_of(measured("[[1e6, 1e-5], [1e9, 1e-2]]", "[[1e6, 1e-5], [1e5, 1e-2]]")),
            "h100.json: $.measured.kernels[0].points[1][0]: sizes must increase: 100000.0 "
            "follows 1000000.0");
  EXPECT_EQ(error_of(measured("[[3072, 2e-6]]", "[[3072, 0]]")),
            "h100.json: $.measured.kernels[1].points[0][1]: expected a number > 0, got 0");
  EXPECT_EQ(error_of(measured("\"by\": \"bytes\"", "\"by\": \"elements\"")),
            "h100.json: $.measured.kernels[1].by: expected one of \"flops\", \"bytes\", got "
            "\"elements\"");
  EXPECT_EQ(
      error_of(measured("\"ranks\": 2", "\"ranks\": 1")),
      "h100.json: $.measured.collectives[0].ranks: expected an integer from 2 to 65536, got 1");
  EXPECT_EQ(error_of(measured("all_reduce", "allreduce")).substr(0, 62),
            "h100.json: $.measured.collectives[0].kind: expected one of \"al");
  EXPECT_EQ(error_of(measured("\"points\": [[3072, 2e-6]]", "\"points\": []")),
            "h100.json: $.measured.kernels[1].points: expected at least one [size, seconds] "
            "pair, got []");
}

}  // namespace
}  // namespace piper::formats
