#include "formats/measured_costs.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>

#include "formats/strategy_reader.h"

namespace piper::formats {
namespace {

using strategy::reader::Context;
using strategy::reader::json;
using strategy::reader::Keys;
using strategy::reader::Object;
using strategy::reader::Range;

constexpr CollectiveKind kCollectiveKinds[] = {
    CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather,
    CollectiveKind::kAllToAll,  CollectiveKind::kBroadcast,     CollectiveKind::kTransfer};

// [[size, seconds], ...]: at least one point, sizes > 0 and increasing, seconds > 0.
MeasuredCurve read_curve(const Context& ctx, const std::string& path, const json& value) {
  const json& points = strategy::reader::read_array(ctx, path, value, "[size, seconds] pairs");
  if (points.empty()) ctx.fail(path, "expected at least one [size, seconds] pair, got []");
  MeasuredCurve curve;
  for (size_t i = 0; i < points.size(); ++i) {
    const std::string at = strategy::reader::index_path(path, i);
    const json& point = points[i];
    if (!point.is_array() || point.size() != 2) ctx.expected(at, "a [size, seconds] pair", point);
    const double size = strategy::reader::read_number(ctx, strategy::reader::index_path(at, 0),
                                                      point[0], Range{.min = 0, .min_open = true});
    const double seconds = strategy::reader::read_number(
        ctx, strategy::reader::index_path(at, 1), point[1], Range{.min = 0, .min_open = true});
    if (!curve.points.empty() && !(size > curve.points.back().first)) {
      ctx.fail(strategy::reader::index_path(at, 0),
               "sizes must increase: " + strategy::reader::shown(point[0]) + " follows " +
                   strategy::reader::shown(points[i - 1][0]));
    }
    curve.points.emplace_back(size, seconds);
  }
  return curve;
}

json curve_json(const MeasuredCurve& curve) {
  json points = json::array();
  for (const auto& [size, seconds] : curve.points) points.push_back({size, seconds});
  return points;
}

// [number, ...]: `what` numbers > 0, and with `increasing` each above the one before.
std::vector<double> read_positive_numbers(const Context& ctx, const std::string& path,
                                          const json& value, const std::string& what,
                                          bool increasing) {
  const json& numbers = strategy::reader::read_array(ctx, path, value, what);
  if (numbers.empty()) ctx.fail(path, "expected at least one of " + what + ", got []");
  std::vector<double> result;
  for (size_t i = 0; i < numbers.size(); ++i) {
    const std::string at = strategy::reader::index_path(path, i);
    const double number =
        strategy::reader::read_number(ctx, at, numbers[i], Range{.min = 0, .min_open = true});
    if (increasing && !result.empty() && !(number > result.back())) {
      ctx.fail(at, "sizes must increase: " + strategy::reader::shown(numbers[i]) + " follows " +
                       strategy::reader::shown(numbers[i - 1]));
    }
    result.push_back(number);
  }
  return result;
}

MeasuredKernel read_kernel(const Context& ctx, const std::string& path, const json& value) {
  const Object o(ctx, value, path, {"op", "dtype", "by", "points", "alone"},
                 {"op", "dtype", "by", "points"});
  MeasuredKernel kernel;
  kernel.op_type = *o.get("op", strategy::reader::read_string);
  kernel.dtype = *o.choice("dtype", {"float32", "bfloat16"});
  kernel.key = *o.choice("by", {"flops", "bytes"}) == "flops" ? CostKey::kFlops : CostKey::kBytes;
  kernel.curve = *o.get("points", read_curve);
  const std::string what = std::to_string(kernel.curve.points.size()) + " seconds (one per point)";
  if (std::optional<std::vector<double>> alone =
          o.get("alone", read_positive_numbers, what, false)) {
    if (alone->size() != kernel.curve.points.size()) {
      o.fail("alone", "expected " + what + ", got " + std::to_string(alone->size()));
    }
    kernel.alone = std::move(*alone);
  }
  return kernel;
}

json kernel_json(const MeasuredKernel& kernel) {
  json entry = {{"op", kernel.op_type},
                {"dtype", kernel.dtype},
                {"by", kernel.key == CostKey::kFlops ? "flops" : "bytes"},
                {"points", curve_json(kernel.curve)}};
  if (!kernel.alone.empty()) entry["alone"] = kernel.alone;
  return entry;
}

constexpr std::string_view kLayouts[] = {"nn", "nt", "tn", "tt"};

// {"nn": [seconds, ...], ...}: `count` seconds for each layout in `layouts`, "nn" among them.
std::map<std::string, std::vector<double>> read_grid_seconds(const Object& o,
                                                             const std::string& key,
                                                             const Keys& layouts, size_t count) {
  const Object by_layout(o.ctx(), *o.find(key), o.at(key), layouts, {"nn"});
  const std::string what = std::to_string(count) + " seconds (one per [m, n, k] of the sizes)";
  std::map<std::string, std::vector<double>> grid;
  for (std::string_view layout : layouts) {
    std::optional<std::vector<double>> seconds =
        by_layout.get(layout, read_positive_numbers, what, false);
    if (!seconds) continue;
    if (seconds->size() != count) {
      by_layout.fail(layout, "expected " + what + ", got " + std::to_string(seconds->size()));
    }
    grid.emplace(std::string(layout), std::move(*seconds));
  }
  return grid;
}

MeasuredProducts read_products(const Context& ctx, const std::string& path, const json& value) {
  const Object o(ctx, value, path, {"dtype", "sizes", "seconds", "alone"},
                 {"dtype", "sizes", "seconds"});
  MeasuredProducts products;
  products.dtype = *o.choice("dtype", {"float32", "bfloat16"});
  products.sizes = *o.get("sizes", read_positive_numbers, "sizes", true);
  const size_t count = products.sizes.size() * products.sizes.size() * products.sizes.size();
  products.seconds =
      read_grid_seconds(o, "seconds", Keys(std::begin(kLayouts), std::end(kLayouts)), count);
  if (o.find("alone") != nullptr) {
    Keys measured;
    for (const auto& [layout, seconds] : products.seconds) measured.push_back(layout);
    products.alone = read_grid_seconds(o, "alone", measured, count);
    if (products.alone.size() != products.seconds.size()) {
      o.fail("alone", "expected the layouts of \"seconds\" (" +
                          strategy::reader::joined(measured, false) + "), got " +
                          std::to_string(products.alone.size()) + " of them");
    }
  }
  return products;
}

json products_json(const MeasuredProducts& products) {
  json entry = {{"dtype", products.dtype}, {"sizes", products.sizes}};
  entry["seconds"] = products.seconds;
  if (!products.alone.empty()) entry["alone"] = products.alone;
  return entry;
}

MeasuredCollective read_collective(const Context& ctx, const std::string& path, const json& value) {
  const Keys keys = {"kind", "ranks", "points"};
  const Object o(ctx, value, path, keys, keys);
  Keys names;
  for (CollectiveKind kind : kCollectiveKinds) names.push_back(collective_name(kind));
  const std::string name = *o.choice("kind", names);
  MeasuredCollective collective;
  for (CollectiveKind kind : kCollectiveKinds) {
    if (name == collective_name(kind)) collective.kind = kind;
  }
  collective.ranks = static_cast<int>(*o.integer("ranks", 2, strategy::reader::kMaxDevices));
  if (collective.kind == CollectiveKind::kTransfer && collective.ranks != 2) {
    o.fail("ranks", "a transfer is between 2 ranks, got " + std::to_string(collective.ranks));
  }
  collective.curve = *o.get("points", read_curve);
  return collective;
}

}  // namespace

double MeasuredCurve::seconds(double size) const {
  if (points.empty()) return 0;
  if (size <= points.front().first) return points.front().second;
  if (size >= points.back().first) return points.back().second * size / points.back().first;
  size_t i = 1;
  while (points[i].first < size) ++i;
  const auto [x0, y0] = points[i - 1];
  const auto [x1, y1] = points[i];
  const double exponent = std::log(y1 / y0) / std::log(x1 / x0);
  return y0 * std::pow(size / x0, exponent);
}

double MeasuredProducts::product_seconds(double m, double n, double k,
                                         const std::string& layout) const {
  auto found = seconds.find(layout);
  if (found == seconds.end()) found = seconds.find("nn");
  const std::vector<double>& grid = found->second;
  const size_t count = sizes.size();
  // Per size: the two grid indices around it and the second one's weight, in log space.
  double beyond = 1;
  const auto cell = [&](double x) -> std::tuple<size_t, size_t, double> {
    if (x > sizes.back()) {
      beyond *= x / sizes.back();
      return {count - 1, count - 1, 0.0};
    }
    if (count == 1 || x <= sizes.front()) return {0, 0, 0.0};
    size_t i = 1;
    while (sizes[i] < x) ++i;
    return {i - 1, i, std::log(x / sizes[i - 1]) / std::log(sizes[i] / sizes[i - 1])};
  };
  const auto [m0, m1, wm] = cell(m);
  const auto [n0, n1, wn] = cell(n);
  const auto [k0, k1, wk] = cell(k);
  double log_seconds = 0;
  for (const auto& [im, fm] : {std::pair{m0, 1 - wm}, std::pair{m1, wm}}) {
    for (const auto& [in, fn] : {std::pair{n0, 1 - wn}, std::pair{n1, wn}}) {
      for (const auto& [ik, fk] : {std::pair{k0, 1 - wk}, std::pair{k1, wk}}) {
        const double weight = fm * fn * fk;
        if (weight > 0) log_seconds += weight * std::log(grid[(im * count + in) * count + ik]);
      }
    }
  }
  return beyond * std::exp(log_seconds);
}

std::string product_layout(bool trans_a, bool trans_b) {
  return std::string(trans_a ? "t" : "n") + (trans_b ? "t" : "n");
}

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kTransfer:
      return "transfer";
  }
  return "?";
}

const MeasuredKernel* MeasuredCosts::kernel(const std::string& op_type,
                                            const std::string& dtype) const {
  for (const MeasuredKernel& measured : kernels) {
    if (measured.op_type == op_type && measured.dtype == dtype) return &measured;
  }
  return nullptr;
}

const MeasuredProducts* MeasuredCosts::products_in(const std::string& dtype) const {
  for (const MeasuredProducts& grid : products) {
    if (grid.dtype == dtype) return &grid;
  }
  return nullptr;
}

const MeasuredCollective* MeasuredCosts::collective(CollectiveKind kind, int ranks) const {
  for (const MeasuredCollective& measured : collectives) {
    if (measured.kind == kind && measured.ranks == ranks) return &measured;
  }
  return nullptr;
}

bool MeasuredCosts::has_alone() const {
  return std::any_of(kernels.begin(), kernels.end(),
                     [](const MeasuredKernel& kernel) { return !kernel.alone.empty(); }) ||
         std::any_of(products.begin(), products.end(),
                     [](const MeasuredProducts& grid) { return !grid.alone.empty(); });
}

MeasuredCosts MeasuredCosts::alone_on_node() const {
  MeasuredCosts costs = *this;
  for (MeasuredKernel& kernel : costs.kernels) {
    for (size_t i = 0; i < kernel.alone.size(); ++i) {
      kernel.curve.points[i].second = kernel.alone[i];
    }
  }
  for (MeasuredProducts& grid : costs.products) {
    if (!grid.alone.empty()) grid.seconds = grid.alone;
  }
  return costs;
}

double attention_flops(double batch, double t, double d, double tk, double dv, bool gradient) {
  const double scores = batch * t * tk;
  return gradient ? scores * (6 * d + 4 * dv + 10) : scores * (2 * d + 2 * dv + 5);
}

MeasuredCosts read_measured_costs(const Object& top) {
  const Keys keys = {"on", "kernels", "products", "collectives"};
  const Object o(top.ctx(), *top.find("measured"), top.at("measured"), keys,
                 {"on", "kernels", "collectives"});
  MeasuredCosts costs;
  costs.on = *o.get("on", strategy::reader::read_string);
  const json& kernels =
      strategy::reader::read_array(o.ctx(), o.at("kernels"), *o.find("kernels"), "kernels");
  for (size_t i = 0; i < kernels.size(); ++i) {
    const std::string path = strategy::reader::index_path(o.at("kernels"), i);
    MeasuredKernel kernel = read_kernel(o.ctx(), path, kernels[i]);
    if (costs.kernel(kernel.op_type, kernel.dtype) != nullptr) {
      o.ctx().fail(path, kernel.op_type + " in " + kernel.dtype + " is measured twice");
    }
    costs.kernels.push_back(std::move(kernel));
  }
  if (const json* products = o.find("products")) {
    const json& grids =
        strategy::reader::read_array(o.ctx(), o.at("products"), *products, "products grids");
    for (size_t i = 0; i < grids.size(); ++i) {
      const std::string path = strategy::reader::index_path(o.at("products"), i);
      MeasuredProducts grid = read_products(o.ctx(), path, grids[i]);
      if (costs.products_in(grid.dtype) != nullptr) {
        o.ctx().fail(path, "products in " + grid.dtype + " are measured twice");
      }
      costs.products.push_back(std::move(grid));
    }
  }
  const json& collectives = strategy::reader::read_array(o.ctx(), o.at("collectives"),
                                                         *o.find("collectives"), "collectives");
  for (size_t i = 0; i < collectives.size(); ++i) {
    const std::string path = strategy::reader::index_path(o.at("collectives"), i);
    MeasuredCollective collective = read_collective(o.ctx(), path, collectives[i]);
    if (costs.collective(collective.kind, collective.ranks) != nullptr) {
      o.ctx().fail(path, std::string(collective_name(collective.kind)) + " over " +
                             std::to_string(collective.ranks) + " ranks is measured twice");
    }
    costs.collectives.push_back(std::move(collective));
  }
  return costs;
}

std::string measured_costs_text(const MeasuredCosts& costs) {
  const auto lines = [](const std::vector<json>& entries) {
    std::string text = "[";
    for (size_t i = 0; i < entries.size(); ++i) {
      text += (i == 0 ? "\n    " : ",\n    ") + entries[i].dump();
    }
    return text + (entries.empty() ? "]" : "\n  ]");
  };
  std::vector<json> kernels;
  for (const MeasuredKernel& kernel : costs.kernels) kernels.push_back(kernel_json(kernel));
  std::vector<json> products;
  for (const MeasuredProducts& grid : costs.products) products.push_back(products_json(grid));
  std::vector<json> collectives;
  for (const MeasuredCollective& collective : costs.collectives) {
    collectives.push_back({{"kind", collective_name(collective.kind)},
                           {"ranks", collective.ranks},
                           {"points", curve_json(collective.curve)}});
  }
  return "{\n  \"on\": " + json(costs.on).dump() + ",\n  \"kernels\": " + lines(kernels) +
         (products.empty() ? "" : ",\n  \"products\": " + lines(products)) +
         ",\n  \"collectives\": " + lines(collectives) + "\n}";
}

}  // namespace piper::formats
