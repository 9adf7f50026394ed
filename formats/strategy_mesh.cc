// Device-mesh geometry: how "axis": NAME turns into device lists and groups.
#include "formats/strategy.h"

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

}  // namespace piper::strategy
