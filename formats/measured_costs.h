// Measured costs of one device and its links (piper-run --profile-costs writes them into a
// cluster file's "measured" section, docs/cost-model.md): for each kernel the profile timed, its
// seconds at increasing FLOPs or bytes, and for each collective and group size its seconds at
// increasing bytes. The cost model (planner/sim) reads a kernel's or collective's time off these
// curves and falls back to the cluster's scalar rates for what was not measured.
// A profile taken by several ranks times every kernel twice: with every rank of the node running
// it at once (the curves), and on one rank while the others idle (the `alone` times), since ranks
// that share a machine's cores, caches and memory bus run faster while their neighbours wait.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace piper::formats {

// Seconds at increasing sizes. Between two points the time follows the power law through them
// (straight in log-log); below the first point it is the first point's (a kernel that small is
// dispatch-bound); beyond the last it grows in proportion to the size (the last point's rate).
struct MeasuredCurve {
  std::vector<std::pair<double, double>> points;  // (size, seconds): sizes > 0 and increasing

  double seconds(double size) const;
};

// What a kernel's curve is indexed by: its floating-point operations (products, attention), or
// the bytes of every tensor it reads and writes (the rest).
enum class CostKey { kFlops, kBytes };

struct MeasuredKernel {
  std::string op_type;  // the plan's kernel op type ("piper.MatMul", "Add")
  std::string dtype;    // "float32" or "bfloat16": of its floating-point inputs
  CostKey key = CostKey::kBytes;
  MeasuredCurve curve;
  // Seconds at the curve's sizes on one rank while the node's other ranks idle; empty when not
  // measured (a profile of one rank).
  std::vector<double> alone;
};

// Seconds of matrix products [m, k] x [k, n] on a grid of shapes. Products of equal FLOPs run at
// rates that differ by shape and layout (a long K, a transposed operand: on this project's CPU up
// to a quarter slower than a square product), so where a profile has this grid the cost model
// prices a product by its own shape, not off its FLOPs curve.
struct MeasuredProducts {
  std::string dtype;          // "float32" or "bfloat16"
  std::vector<double> sizes;  // what m, n and k each take: > 0, increasing
  // By layout, "nn", "nt" (B transposed), "tn" (A transposed) or "tt": sizes^3 seconds, m the
  // slowest index and k the fastest. "nn" is always there and stands in for an unmeasured one.
  std::map<std::string, std::vector<double>> seconds;
  // As `seconds`, on one rank while the node's other ranks idle; empty when not measured, else
  // the same layouts.
  std::map<std::string, std::vector<double>> alone;

  // Between grid points the power law in each size (trilinear in log-log); a size below the
  // grid costs as its first (dispatch-bound), one above it in proportion (at the edge's rate).
  double product_seconds(double m, double n, double k, const std::string& layout) const;
};

// "nn", "nt", "tn" or "tt": which of a product's operands are read transposed.
std::string product_layout(bool trans_a, bool trans_b);

// Collectives and transfers as the cost model prices them; kTransfer is a send matched by its
// recv between two ranks.
enum class CollectiveKind {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kAllToAll,
  kBroadcast,
  kTransfer
};

// "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "transfer".
const char* collective_name(CollectiveKind kind);

struct MeasuredCollective {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  int ranks = 2;        // the group's size (2 for a transfer)
  MeasuredCurve curve;  // by bytes: the collective's buffer (docs/cost-model.md, "Volume")
};

struct MeasuredCosts {
  std::string on;  // what was measured, how: "cpu, 2 threads per rank, 2 ranks, gloo"
  std::vector<MeasuredKernel> kernels;
  std::vector<MeasuredProducts> products;       // at most one grid per dtype
  std::vector<MeasuredCollective> collectives;  // groups within one node

  bool empty() const { return kernels.empty() && products.empty() && collectives.empty(); }
  // Whether some kernel or grid has its times alone.
  bool has_alone() const;
  // These costs as a rank alone on its node runs: each kernel's and grid's times alone in place
  // of its curve's, where measured.
  MeasuredCosts alone_on_node() const;
  // The curve of `op_type` in `dtype`, or null when the profile did not time it.
  const MeasuredKernel* kernel(const std::string& op_type, const std::string& dtype) const;
  // The products grid in `dtype`, or null when the profile did not time one.
  const MeasuredProducts* products_in(const std::string& dtype) const;
  // The curve of `kind` over `ranks` ranks, or null when the profile did not time it.
  const MeasuredCollective* collective(CollectiveKind kind, int ranks) const;
};

// FLOPs of a matrix product of [m, k] by [k, n] (one multiply and one add per term): the key of
// products' curves, as the cost model counts them.
inline double product_flops(double m, double n, double k) { return 2 * m * n * k; }
// FLOPs of piper.FusedAttention (or, `gradient`, piper.FusedAttentionGrad) over `batch` heads of
// `t` queries of width `d` against `tk` keys with values of width `dv`: forward S = Q Kt,
// softmax, Y = P V; backward S again, dV, dP, dQ, dKt.
double attention_flops(double batch, double t, double d, double tk, double dv, bool gradient);

}  // namespace piper::formats

namespace piper::strategy::reader {
class Object;
}

namespace piper::formats {

// Reads the "measured" object at `o`'s key "measured"; throws piper::Error naming the JSON path
// of what is wrong (sizes not increasing, an unknown collective, a group under 2 ranks, a
// products grid without sizes^3 times).
MeasuredCosts read_measured_costs(const strategy::reader::Object& o);
// The "measured" object read_measured_costs reads, as JSON text laid out for a cluster file's
// top level: one line per kernel, products grid and collective.
std::string measured_costs_text(const MeasuredCosts& costs);

}  // namespace piper::formats
