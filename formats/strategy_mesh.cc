// Device meshes: the geometry of strategy.h (how "axis": NAME turns into device lists and
// groups) and the readers of strategy_reader.h for "mesh", "axis" and shard's device groups.
#include <map>
#include <set>

#include "formats/strategy_reader.h"

namespace piper::strategy {
namespace {

// How far apart two devices are whose coordinates differ by one along `axis`: the product
// of the sizes of the axes after it (row-major, the last axis fastest).
int64_t stride_of(const std::vector<MeshAxis>& mesh, size_t axis) {
  int64_t stride = 1;
  for (size_t k = axis + 1; k < mesh.size(); ++k) stride *= mesh[k].size;
  return stride;
}

std::vector<int64_t> along(const std::vector<MeshAxis>& mesh, size_t axis, int64_t first) {
  std::vector<int64_t> devices;
  const int64_t stride = stride_of(mesh, axis);
  for (int64_t c = 0; c < mesh.at(axis).size; ++c) devices.push_back(first + c * stride);
  return devices;
}

}  // namespace

int64_t mesh_device_count(const std::vector<MeshAxis>& mesh) {
  int64_t count = 1;
  for (const MeshAxis& axis : mesh) count *= axis.size;
  return count;
}

std::vector<int64_t> mesh_axis_leaders(const std::vector<MeshAxis>& mesh, size_t axis) {
  return along(mesh, axis, 0);
}

std::vector<std::vector<int64_t>> mesh_axis_groups(const std::vector<MeshAxis>& mesh, size_t axis) {
  const int64_t stride = stride_of(mesh, axis);
  const int64_t size = mesh.at(axis).size;
  std::vector<std::vector<int64_t>> groups;
  // The first device of each group is one whose coordinate along `axis` is 0.
  for (int64_t device = 0; device < mesh_device_count(mesh); ++device) {
    if ((device / stride) % size == 0) groups.push_back(along(mesh, axis, device));
  }
  return groups;
}

std::vector<int64_t> mesh_replicas(const std::vector<MeshAxis>& mesh, int64_t device,
                                   const std::vector<size_t>& axes) {
  std::vector<int64_t> devices = {device};
  // Each axis in turn multiplies the set, so the last axis varies fastest (row-major).
  for (size_t axis : axes) {
    const int64_t stride = stride_of(mesh, axis);
    const int64_t own = (device / stride) % mesh.at(axis).size;
    std::vector<int64_t> product;
    for (int64_t d : devices) {
      for (int64_t c = 0; c < mesh[axis].size; ++c) product.push_back(d + (c - own) * stride);
    }
    devices = std::move(product);
  }
  return devices;
}

namespace reader {
namespace {

std::string axis_names(const std::vector<MeshAxis>& mesh) {
  std::string names;
  for (const MeshAxis& axis : mesh) names += (names.empty() ? "" : ", ") + axis.name;
  return names;
}

// shard's "devices": a flat list is one group, a list of lists several, of one size and
// disjoint (every other directive names a group by its first device).
std::vector<std::vector<int64_t>> read_device_groups(const Context& ctx, const std::string& path,
                                                     const json& v) {
  if (!v.is_array() || v.empty() || !v[0].is_array()) return {read_devices(ctx, path, v)};
  read_array(ctx, path, v, "device lists");
  std::vector<std::vector<int64_t>> groups;
  std::map<int64_t, size_t> group_of;
  for (size_t g = 0; g < v.size(); ++g) {
    const std::string at = index_path(path, g);
    const std::vector<int64_t>& group = groups.emplace_back(read_devices(ctx, at, v[g]));
    if (group.size() != groups.front().size()) {
      ctx.fail(at, "has " + std::to_string(group.size()) + " devices, but " + index_path(path, 0) +
                       " has " + std::to_string(groups.front().size()) +
                       "; groups are the same size");
    }
    for (size_t i = 0; i < group.size(); ++i) {
      const auto [first, fresh] = group_of.emplace(group[i], g);
      if (!fresh) {
        ctx.fail(index_path(at, i), "device " + std::to_string(group[i]) + " is also in " +
                                        index_path(path, first->second) + "; groups are disjoint");
      }
    }
  }
  return groups;
}

// "axis": NAME, the index of that axis in the mesh.
size_t read_axis(const Context& ctx, const std::string& path, const json& v) {
  if (!v.is_string()) ctx.expected(path, "a mesh axis name (string)", v);
  const std::string& name = v.get_ref<const std::string&>();
  const std::vector<MeshAxis>& mesh = ctx.mesh();
  if (mesh.empty()) {
    ctx.fail(path, "\"" + name +
                       "\" names a mesh axis, but the strategy has no \"mesh\"; declare one "
                       "(\"mesh\": [[\"" +
                       name + "\", 2], ...]) or list \"devices\"");
  }
  auto it = std::find_if(mesh.begin(), mesh.end(),
                         [&](const MeshAxis& axis) { return axis.name == name; });
  if (it == mesh.end()) {
    ctx.fail(path, "unknown mesh axis \"" + name + "\"; the mesh's axes are " + axis_names(mesh));
  }
  return static_cast<size_t>(it - mesh.begin());
}

// The mesh axis "axis" names, or nullopt when the directive lists "devices"; exactly one of
// the two is given.
std::optional<size_t> named_axis(const Object& o) {
  const json* axis = o.find("axis");
  const bool devices = o.find("devices") != nullptr;
  if (axis && devices) {
    o.fail("axis",
           "given with \"devices\"; give one of the two (\"axis\" names a mesh axis, "
           "\"devices\" lists devices)");
  }
  if (!axis && !devices) {
    o.ctx().fail(o.path(), "missing required key \"devices\" (or \"axis\", a mesh axis)");
  }
  if (!axis) return std::nullopt;
  return read_axis(o.ctx(), o.at("axis"), *axis);
}

}  // namespace

void check_in_mesh(const Context& ctx, const std::string& path, int64_t device) {
  const std::vector<MeshAxis>& mesh = ctx.mesh();
  const int64_t count = mesh_device_count(mesh);
  if (mesh.empty() || device < count) return;
  std::string shape;
  for (const MeshAxis& axis : mesh) {
    shape += (shape.empty() ? "" : " x ") + axis.name + " " + std::to_string(axis.size);
  }
  ctx.fail(path, "device " + std::to_string(device) + " is outside the mesh (" + shape +
                     ": devices 0 to " + std::to_string(count - 1) + ")");
}

// "mesh": [["dp", 2], ["tp", 2]]: named axes in order, each of size >= 1.
std::vector<MeshAxis> read_mesh(const Context& ctx, const std::string& path, const json& v) {
  read_array(ctx, path, v, "[name, size] axes");
  if (v.empty()) ctx.expected(path, "a non-empty array of [name, size] axes", v);
  std::vector<MeshAxis> mesh;
  int64_t count = 1;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = index_path(path, i);
    const json& axis = v[i];
    if (!axis.is_array() || axis.size() != 2) {
      ctx.expected(at, "an axis [name, size], e.g. [\"tp\", 2]", axis);
    }
    if (!axis[0].is_string() || !is_identifier(axis[0].get_ref<const std::string&>())) {
      ctx.expected(at + "[0]", "an axis name (letters, digits and _, not starting with a digit)",
                   axis[0]);
    }
    const std::string& name = axis[0].get_ref<const std::string&>();
    for (size_t j = 0; j < mesh.size(); ++j) {
      if (mesh[j].name == name) {
        ctx.fail(at + "[0]", "axis \"" + mesh[j].name + "\" is already " + index_path(path, j) +
                                 "; axis names are unique");
      }
    }
    const int64_t size = read_int(ctx, at + "[1]", axis[1], 1, kMaxDevices);
    count *= size;
    if (count > kMaxDevices) {
      ctx.fail(at + "[1]", "makes a mesh of " + std::to_string(count) +
                               " devices; Piper takes at most " + std::to_string(kMaxDevices));
    }
    mesh.push_back({.name = name, .size = size});
  }
  return mesh;
}

std::vector<int64_t> device_list(const Object& o) {
  if (std::optional<size_t> axis = named_axis(o)) {
    return mesh_axis_leaders(o.ctx().mesh(), *axis);
  }
  return *o.devices("devices");
}

std::vector<std::vector<int64_t>> device_groups(const Object& o) {
  if (std::optional<size_t> axis = named_axis(o)) return mesh_axis_groups(o.ctx().mesh(), *axis);
  return *o.get("devices", read_device_groups);
}

namespace {

std::string device_lists(const std::vector<std::vector<int64_t>>& lists) {
  std::string text;
  for (size_t i = 0; i < lists.size(); ++i) {
    text += i == 0 ? "" : (i + 1 == lists.size() ? " and " : ", ");
    text += "[";
    for (size_t k = 0; k < lists[i].size(); ++k) {
      text += (k == 0 ? "" : ", ") + std::to_string(lists[i][k]);
    }
    text += "]";
  }
  return text;
}

// The mesh axes a shard directive splits over: the one it names, or those whose groups are
// the ones it lists.
std::set<size_t> sharded_axes(const Strategy& s) {
  std::set<size_t> axes;
  for (const Directive& directive : s.directives) {
    const auto* shard = std::get_if<ShardDirective>(&directive.spec);
    if (!shard) continue;
    for (size_t axis = 0; axis < s.mesh.size(); ++axis) {
      if (mesh_axis_groups(s.mesh, axis) == shard->groups) axes.insert(axis);
    }
  }
  return axes;
}

// "axis": the axes that replicate whole pipelines, "replica_axes" or by default every other
// axis of size > 1 that no shard splits over (a shard's axis is tensor-parallel: its groups
// are named by their leaders).
std::vector<size_t> replicating_axes(const Context& ctx, const Strategy& s, const Directive& d) {
  const size_t own = read_axis(ctx, d.path + ".axis", d.json.at("axis"));
  std::vector<size_t> axes;
  if (const auto named = d.json.find("replica_axes"); named != d.json.end()) {
    for (size_t i = 0; i < named->size(); ++i) {
      axes.push_back(read_axis(ctx, index_path(d.path + ".replica_axes", i), (*named)[i]));
    }
    std::sort(axes.begin(), axes.end());
    return axes;
  }
  const std::set<size_t> sharded = sharded_axes(s);
  for (size_t axis = 0; axis < s.mesh.size(); ++axis) {
    if (axis != own && s.mesh[axis].size > 1 && !sharded.count(axis)) axes.push_back(axis);
  }
  return axes;
}

// "zero" and "bucket_size" describe the replicates; a pipeline without replicas has none
// (but for dualpipe's mirrors).
void check_replicated(const Context& ctx, const Directive& d, const PipelineDirective& pipeline) {
  // DualPipe replicates every stage over its two mirror devices by itself.
  if (!pipeline.replicas.empty() || pipeline.schedule == "dualpipe" ||
      (pipeline.zero == 0 && !pipeline.bucket_size)) {
    return;
  }
  const std::string how = d.json.contains("axis")
                              ? "no other mesh axis of size > 1 that no shard splits over; name "
                                "the replicating axes in \"replica_axes\""
                              : "list each device's replicas in \"replicas\"";
  ctx.fail(d.path + (pipeline.zero != 0 ? ".zero" : ".bucket_size"),
           "configures the data parallelism of replicated stages, but nothing replicates this "
           "pipeline's stages (" +
               how + ")");
}

// A replicate or zero directive beside a pipeline that replicates its stages would
// synchronise the same gradients twice.
void check_no_other_replication(const Context& ctx, const Strategy& s, const Directive& pipeline) {
  for (const Directive& other : s.directives) {
    if (other.op != "replicate" && other.op != "zero") continue;
    ctx.fail(other.path, "a " + other.op + " directive beside " + pipeline.path +
                             ", a pipeline that replicates its stages over " +
                             device_lists(std::get<PipelineDirective>(pipeline.spec).replicas) +
                             " (one replicate each); drop this directive and give " +
                             pipeline.path + " \"zero\": 0 to 3 (and \"bucket_size\") instead");
  }
}

}  // namespace

std::vector<std::vector<int64_t>> pipeline_replicas(const Object& o,
                                                    const std::vector<int64_t>& devices) {
  const bool axis = o.find("axis") != nullptr;
  if (const json* named = o.find("replica_axes")) {
    if (!axis) {
      o.fail("replica_axes",
             "names mesh axes, but the pipeline lists \"devices\"; give "
             "\"axis\" instead, or list each device's replicas in \"replicas\"");
    }
    read_array(o.ctx(), o.at("replica_axes"), *named, "mesh axis names");
    if (named->empty()) o.ctx().expected(o.at("replica_axes"), "a non-empty array", *named);
    std::set<size_t> seen = {read_axis(o.ctx(), o.at("axis"), *o.find("axis"))};
    for (size_t i = 0; i < named->size(); ++i) {
      const std::string at = index_path(o.at("replica_axes"), i);
      if (!seen.insert(read_axis(o.ctx(), at, (*named)[i])).second) {
        o.ctx().fail(at, "\"" + (*named)[i].get<std::string>() +
                             "\" is the pipeline's axis or named twice; name each replicating "
                             "axis once");
      }
    }
  }
  const json* listed = o.find("replicas");
  if (!listed) return {};
  if (axis) {
    o.fail("replicas",
           "given with \"axis\"; the mesh gives the replicas (name their axes in "
           "\"replica_axes\" if the default is not what you mean)");
  }
  const std::vector<std::vector<int64_t>> replicas = *o.get("replicas", read_device_groups);
  if (replicas.size() != devices.size() || !listed->at(0).is_array()) {
    o.ctx().expected(o.at("replicas"),
                     "one device list per device of \"devices\" (" +
                         std::to_string(devices.size()) +
                         "), each the devices its stages are replicated over",
                     *listed);
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    const auto& group = replicas[i];
    if (std::find(group.begin(), group.end(), devices[i]) == group.end()) {
      o.ctx().fail(index_path(o.at("replicas"), i),
                   "does not hold device " + std::to_string(devices[i]) + " (\"devices\"[" +
                       std::to_string(i) + "]), whose stages it replicates");
    }
  }
  return replicas;
}

void resolve_pipeline_replicas(const Context& ctx, Strategy& s) {
  for (Directive& directive : s.directives) {
    auto* pipeline = std::get_if<PipelineDirective>(&directive.spec);
    if (!pipeline) continue;
    if (directive.json.contains("axis")) {
      const std::vector<size_t> axes = replicating_axes(ctx, s, directive);
      pipeline->replicas.clear();
      for (int64_t device : pipeline->devices) {
        std::vector<int64_t> replicas = mesh_replicas(s.mesh, device, axes);
        if (replicas.size() > 1) pipeline->replicas.push_back(std::move(replicas));
      }
    }
    check_replicated(ctx, directive, *pipeline);
    if (!pipeline->replicas.empty()) check_no_other_replication(ctx, s, directive);
  }
}

}  // namespace reader
}  // namespace piper::strategy
