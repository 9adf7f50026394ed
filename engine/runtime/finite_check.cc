#include "engine/runtime/finite_check.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "formats/error.h"

namespace piper::engine {
namespace {

// The index of the first element whose exponent bits are all ones (NaN or infinity), or -1.
template <typename Bits>
int64_t first_all_ones_exponent(const std::vector<uint8_t>& bytes, Bits exponent) {
  const int64_t count = static_cast<int64_t>(bytes.size() / sizeof(Bits));
  for (int64_t i = 0; i < count; ++i) {
    Bits bits;
    std::memcpy(&bits, bytes.data() + i * sizeof(Bits), sizeof(Bits));
    if ((bits & exponent) == exponent) return i;
  }
  return -1;
}

}  // namespace

std::string NonFiniteValue::describe() const {
  return std::isnan(value) ? "NaN" : value > 0 ? "+inf" : "-inf";
}

std::optional<NonFiniteValue> first_non_finite(const std::vector<uint8_t>& bytes,
                                               plan::DType dtype) {
  const bool wide = dtype == plan::FLOAT32;
  const int64_t at = wide ? first_all_ones_exponent<uint32_t>(bytes, 0x7f800000u)
                          : first_all_ones_exponent<uint16_t>(bytes, 0x7f80u);
  if (at < 0) return std::nullopt;
  NonFiniteValue found;
  found.index = at;
  if (wide) {
    std::memcpy(&found.value, bytes.data() + at * 4, 4);
  } else {
    const uint32_t widened = static_cast<uint32_t>(bytes[at * 2] | bytes[at * 2 + 1] << 8) << 16;
    std::memcpy(&found.value, &widened, 4);
  }
  return found;
}

namespace {

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
      const std::optional<NonFiniteValue> found = first_non_finite(host_, output.view.dtype);
      if (!found) continue;
      throw NonFiniteError("step " + std::to_string(context.step) + ": wrote " + found->describe() +
                               " into " + output.label + " at element " +
                               std::to_string(found->index) + " (--check-finite)",
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
