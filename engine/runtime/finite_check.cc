#include "engine/runtime/finite_check.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "formats/error.h"

namespace piper::engine {
namespace {

// The index of the first element whose exponent bits are all ones (NaN or infinity), or -1.
template <typename Bits>
int64_t first_non_finite(const std::vector<uint8_t>& bytes, Bits exponent) {
  const int64_t count = static_cast<int64_t>(bytes.size() / sizeof(Bits));
  for (int64_t i = 0; i < count; ++i) {
    Bits bits;
    std::memcpy(&bits, bytes.data() + i * sizeof(Bits), sizeof(Bits));
    if ((bits & exponent) == exponent) return i;
  }
  return -1;
}

class FiniteCheck : public PreparedKernel {
 public:
  FiniteCheck(std::unique_ptr<PreparedKernel> kernel, std::vector<CheckedOutput> outputs,
              Backend& backend)
      : kernel_(std::move(kernel)), outputs_(std::move(outputs)), backend_(backend) {}

  void run(const StepContext& context) override {
    kernel_->run(context);
    for (const CheckedOutput& output : outputs_) {
      host_.resize(output.view.bytes());
      backend_.download(host_.data(), output.view.data, host_.size());
      const int64_t at = output.view.dtype == plan::FLOAT32
                             ? first_non_finite<uint32_t>(host_, 0x7f800000u)
                             : first_non_finite<uint16_t>(host_, 0x7f80u);
      if (at < 0) continue;
      float value = 0;
      if (output.view.dtype == plan::FLOAT32) {
        std::memcpy(&value, host_.data() + at * 4, 4);
      } else {
        const uint32_t widened = static_cast<uint32_t>(host_[at * 2] | host_[at * 2 + 1] << 8)
                                 << 16;
        std::memcpy(&value, &widened, 4);
      }
      throw NonFiniteError("step " + std::to_string(context.step) + ": wrote " +
                               (std::isnan(value) ? "NaN"
                                : value > 0       ? "+inf"
                                                  : "-inf") +
                               " into " + output.label + " at element " + std::to_string(at) +
                               " (--check-finite)",
                           false);
    }
  }

 private:
  std::unique_ptr<PreparedKernel> kernel_;
  std::vector<CheckedOutput> outputs_;
  Backend& backend_;
  std::vector<uint8_t> host_;
};

}  // namespace

std::unique_ptr<PreparedKernel> check_finite_outputs(std::unique_ptr<PreparedKernel> kernel,
                                                     std::vector<CheckedOutput> outputs,
                                                     Backend& backend) {
  std::erase_if(outputs, [](const CheckedOutput& output) {
    return !output.view.present() ||
           (output.view.dtype != plan::FLOAT32 && output.view.dtype != plan::BFLOAT16);
  });
  if (outputs.empty()) return kernel;
  return std::make_unique<FiniteCheck>(std::move(kernel), std::move(outputs), backend);
}

}  // namespace piper::engine
