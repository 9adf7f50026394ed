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

void check_pipeline_axes(const Context& ctx, const Strategy& s) {
  std::set<std::string> sharded;
  for (const Directive& directive : s.directives) {
    if (directive.op == "shard" && directive.json.contains("axis")) {
      sharded.insert(directive.json.at("axis").get<std::string>());
    }
  }
  for (const Directive& directive : s.directives) {
    if (directive.op != "pipeline" || !directive.json.contains("axis")) continue;
    const std::string name = directive.json.at("axis").get<std::string>();
    for (const MeshAxis& axis : s.mesh) {
      if (axis.name == name || axis.size == 1 || sharded.count(axis.name)) continue;
      ctx.fail(directive.path + ".axis",
               "a pipeline along mesh axis \"" + name + "\" beside axis \"" + axis.name +
                   "\" (size " + std::to_string(axis.size) +
                   ", which no shard directive names) would replicate whole pipelines; Piper "
                   "does not plan that yet (the pipeline generator places one device per "
                   "stage): list the pipeline's \"devices\" and replicate each stage with its "
                   "own replicate directive");
    }
  }
}

}  // namespace reader
}  // namespace piper::strategy
