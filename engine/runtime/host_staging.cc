#include "engine/runtime/host_staging.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>

namespace piper::engine {
namespace {

// A run of device memory covered by overlapping tensors, and its host copy.
struct Region {
  uint8_t* device = nullptr;
  size_t bytes = 0;
  std::unique_ptr<uint8_t[]> host;
};

class StagedKernel : public PreparedKernel {
 public:
  StagedKernel(Backend& device, std::vector<Region> regions)
      : device_(device), regions_(std::move(regions)) {}

  void set_kernel(std::unique_ptr<PreparedKernel> kernel) { kernel_ = std::move(kernel); }
  void download() {
    for (Region& region : regions_)
      device_.download(region.host.get(), region.device, region.bytes);
  }

  void run(const StepContext& context) override {
    download();
    kernel_->run(context);
    for (Region& region : regions_) device_.upload(region.device, region.host.get(), region.bytes);
  }

 private:
  Backend& device_;
  std::vector<Region> regions_;
  std::unique_ptr<PreparedKernel> kernel_;
};

}  // namespace

std::unique_ptr<PreparedKernel> prepare_on_host(Backend& device, std::vector<TensorView> inputs,
                                                std::vector<TensorView> outputs,
                                                const HostPrepare& prepare) {
  // Merge the tensors' byte ranges into disjoint regions, ordered by address.
  std::map<uint8_t*, size_t> ranges;  // start -> end offset from start
  for (const auto* views : {&inputs, &outputs}) {
    for (const TensorView& view : *views) {
      if (!view.present()) continue;
      auto* start = static_cast<uint8_t*>(view.data);
      size_t& bytes = ranges[start];
      bytes = std::max(bytes, view.bytes());
    }
  }
  std::vector<Region> regions;
  for (const auto& [start, bytes] : ranges) {
    if (!regions.empty() && start <= regions.back().device + regions.back().bytes) {
      Region& last = regions.back();
      last.bytes = std::max(last.bytes, static_cast<size_t>(start + bytes - last.device));
    } else {
      regions.push_back(Region{start, bytes, nullptr});
    }
  }
  // A region of 0 bytes still needs a non-null address.
  for (Region& region : regions) {
    region.host = std::make_unique<uint8_t[]>(std::max<size_t>(region.bytes, 1));
  }
  auto to_host = [&](std::vector<TensorView> views) {
    for (TensorView& view : views) {
      if (!view.present()) continue;
      auto* start = static_cast<uint8_t*>(view.data);
      const auto region = std::prev(std::upper_bound(
          regions.begin(), regions.end(), start,
          [](const uint8_t* address, const Region& r) { return address < r.device; }));
      view.data = region->host.get() + (start - region->device);
    }
    return views;
  };
  std::vector<TensorView> host_inputs = to_host(std::move(inputs));
  std::vector<TensorView> host_outputs = to_host(std::move(outputs));
  auto staged = std::make_unique<StagedKernel>(device, std::move(regions));
  staged->download();
  staged->set_kernel(prepare(std::move(host_inputs), std::move(host_outputs)));
  return staged;
}

}  // namespace piper::engine
