#include "engine/runtime/dynamic_kernel.h"

#include "formats/error.h"

namespace piper::engine {
namespace {

class ExtentKernel : public PreparedKernel {
 public:
  ExtentKernel(Backend& backend, std::vector<TensorView> inputs, std::vector<TensorView> outputs,
               std::vector<RunTimeExtent> extents, KernelPreparer prepare)
      : backend_(backend),
        bounds_(std::move(inputs)),
        num_inputs_(bounds_.size()),
        extents_(std::move(extents)),
        prepare_(std::move(prepare)) {
    bounds_.insert(bounds_.end(), outputs.begin(), outputs.end());
  }

  void run(const StepContext& context) override {
    std::vector<TensorView> views = bounds_;
    std::vector<int64_t> sizes;
    for (const RunTimeExtent& extent : extents_) {
      int64_t value = 0;
      backend_.download(&value, extent.extent, sizeof(value));
      TensorView& view = views.at(extent.view);
      const int64_t bound = view.shape.at(static_cast<size_t>(extent.dim));
      if (value < 0 || value > bound / extent.scale) {
        throw Error("tensor '" + extent.tensor + "' dimension " + std::to_string(extent.dim) +
                    ": the run-time extent " + std::to_string(value) + " x " +
                    std::to_string(extent.scale) + " exceeds the planned bound " +
                    std::to_string(bound));
      }
      view.shape[static_cast<size_t>(extent.dim)] = value * extent.scale;
      sizes.push_back(value);
    }
    if (!kernel_ || sizes != sizes_) {
      kernel_.reset();
      const auto split = views.begin() + static_cast<std::ptrdiff_t>(num_inputs_);
      std::vector<TensorView> inputs(views.begin(), split);
      std::vector<TensorView> outputs(split, views.end());
      kernel_ = prepare_(std::move(inputs), std::move(outputs));
      sizes_ = std::move(sizes);
    }
    kernel_->run(context);
  }

 private:
  Backend& backend_;
  std::vector<TensorView> bounds_;  // inputs, then outputs
  size_t num_inputs_;               // where the outputs start in bounds_
  std::vector<RunTimeExtent> extents_;
  KernelPreparer prepare_;
  std::unique_ptr<PreparedKernel> kernel_;
  std::vector<int64_t> sizes_;  // the extents kernel_ was prepared for
};

}  // namespace

std::unique_ptr<PreparedKernel> prepare_with_extents(Backend& backend,
                                                     std::vector<TensorView> inputs,
                                                     std::vector<TensorView> outputs,
                                                     std::vector<RunTimeExtent> extents,
                                                     KernelPreparer prepare) {
  return std::make_unique<ExtentKernel>(backend, std::move(inputs), std::move(outputs),
                                        std::move(extents), std::move(prepare));
}

}  // namespace piper::engine
