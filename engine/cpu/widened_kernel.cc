#include "engine/cpu/widened_kernel.h"

#include <algorithm>

#include "engine/cpu/bfloat16.h"

namespace piper::engine::cpu {
namespace {

class WidenedKernel : public PreparedKernel {
 public:
  WidenedKernel(const KernelFactory& factory, const plan::Kernel& kernel,
                std::vector<TensorView> inputs, std::vector<TensorView> outputs) {
    for (TensorView& view : inputs) widen_view(view, false);
    for (TensorView& view : outputs) widen_view(view, true);
    widen_all();  // constant inputs hold their values already, and kernels may read them now
    inner_ = factory(KernelArgs(kernel, std::move(inputs), std::move(outputs)));
  }

  void run(const StepContext& context) override {
    widen_all();
    inner_->run(context);
    for (const Copy& copy : copies_) {
      if (copy.written) narrow(copy.wide.data(), copy.narrow, copy.count);
    }
  }

 private:
  struct Copy {
    BFloat16* narrow = nullptr;
    int64_t count = 0;
    std::vector<float> wide;
    bool written = false;
  };

  void widen_view(TensorView& view, bool written) {
    if (!view.present() || view.dtype != plan::BFLOAT16) return;
    auto found = std::find_if(copies_.begin(), copies_.end(),
                              [&](const Copy& copy) { return copy.narrow == view.data; });
    if (found == copies_.end()) {
      Copy copy;
      copy.narrow = view.as<BFloat16>();
      copy.count = view.elements();
      copy.wide.resize(static_cast<size_t>(copy.count));
      copies_.push_back(std::move(copy));
      found = copies_.end() - 1;
    }
    found->written = found->written || written;
    view.data = found->wide.data();
    view.dtype = plan::FLOAT32;
  }

  void widen_all() {
    for (Copy& copy : copies_) widen(copy.narrow, copy.wide.data(), copy.count);
  }

  std::vector<Copy> copies_;
  std::unique_ptr<PreparedKernel> inner_;
};

}  // namespace

bool has_bfloat16(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs) {
  const auto is_bfloat16 = [](const TensorView& view) {
    return view.present() && view.dtype == plan::BFLOAT16;
  };
  return std::any_of(inputs.begin(), inputs.end(), is_bfloat16) ||
         std::any_of(outputs.begin(), outputs.end(), is_bfloat16);
}

std::unique_ptr<PreparedKernel> prepare_widened(const KernelFactory& factory,
                                                const plan::Kernel& kernel,
                                                std::vector<TensorView> inputs,
                                                std::vector<TensorView> outputs) {
  return std::make_unique<WidenedKernel>(factory, kernel, std::move(inputs), std::move(outputs));
}

}  // namespace piper::engine::cpu
