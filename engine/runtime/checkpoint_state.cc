#include "engine/runtime/checkpoint_state.h"

#include <algorithm>
#include <map>

#include "engine/runtime/attributes.h"
#include "formats/error.h"

namespace piper::engine {
namespace {

bool is_update(const plan::Kernel& kernel) {
  return kernel.op_type() == "piper.AdamW" || kernel.op_type() == "piper.SGD";
}

// The kernel writing each tensor, for the piper.Shard an update reads its slice from.
std::map<int, const plan::Kernel*> producers(const plan::Plan& plan) {
  std::map<int, const plan::Kernel*> found;
  for (const plan::Stream& stream : plan.streams()) {
    for (const plan::Instruction& instruction : stream.instructions()) {
      if (!instruction.has_kernel()) continue;
      for (int output : instruction.kernel().outputs())
        found.emplace(output, &instruction.kernel());
    }
  }
  return found;
}

HeldTensor held_parameter(const Session& session, int load_index) {
  const plan::ParameterLoad& load = session.plan().parameters(load_index);
  HeldTensor held;
  held.name = load.initializer();
  held.tensor = load.tensor();
  held.dtype = session.plan().tensors(load.tensor()).dtype();
  held.shape = session.initializer_shape(load_index);
  if (load.has_block()) {
    held.slice.start.assign(held.shape.size(), 0);
    held.slice.size = held.shape;
    held.slice.start.at(static_cast<size_t>(load.block().dim())) = load.block().start();
    held.slice.size.at(static_cast<size_t>(load.block().dim())) = load.block().size();
  }
  if (load.has_shard()) {
    held.slice.flat = true;
    held.slice.flat_offset = load.shard().element_offset();
    held.slice.flat_length = load.shard().element_count();
  }
  held.owned_length = held.slice.elements(held.shape);
  return held;
}

}  // namespace

formats::TensorSlice HeldTensor::owned_slice() const {
  formats::TensorSlice owned = slice;
  if (owned_offset == 0 && owned_length == slice.elements(shape)) return owned;
  owned.flat_offset = (slice.flat ? slice.flat_offset : 0) + owned_offset;
  owned.flat = true;
  owned.flat_length = owned_length;
  return owned;
}

std::string safetensors_dtype(plan::DType dtype) {
  switch (dtype) {
    case plan::FLOAT32:
      return "F32";
    case plan::INT64:
      return "I64";
    case plan::BOOL:
      return "BOOL";
    case plan::BFLOAT16:
      return "BF16";
    default:
      throw Error("checkpoints hold float32, int64, bool and bfloat16 tensors, not " +
                  dtype_name(dtype));
  }
}

std::vector<HeldTensor> held_state(const Session& session) {
  const plan::Plan& plan = session.plan();
  std::vector<HeldTensor> held;
  std::map<int, size_t> by_tensor;  // parameter tensor -> its entry in `held`
  for (int i = 0; i < plan.parameters_size(); ++i) {
    const plan::ParameterLoad& load = plan.parameters(i);
    if (plan.tensors(load.tensor()).role() != plan::PARAMETER) continue;
    const bool seen = std::any_of(held.begin(), held.end(), [&](const HeldTensor& tensor) {
      return tensor.name == load.initializer();
    });
    if (seen) continue;
    by_tensor[load.tensor()] = held.size();
    held.push_back(held_parameter(session, i));
  }
  const std::map<int, const plan::Kernel*> written_by = producers(plan);
  std::vector<HeldTensor> states;
  for (const plan::Stream& stream : plan.streams()) {
    for (const plan::Instruction& instruction : stream.instructions()) {
      if (!instruction.has_kernel() || !is_update(instruction.kernel())) continue;
      const plan::Kernel& update = instruction.kernel();
      const std::string what = update.op_type() + " '" + instruction.label() + "'";
      if (update.inputs_size() < 2) throw Error(what + " has no parameter input; re-plan");
      const int parameter = update.inputs(0);
      HeldTensor* base = nullptr;
      formats::TensorSlice slice;
      int64_t offset = 0, length = 0;
      if (const auto found = by_tensor.find(parameter); found != by_tensor.end()) {
        base = &held[found->second];
        slice = base->slice;
        length = slice.elements(base->shape);
      } else if (const auto shard = written_by.find(parameter);
                 shard != written_by.end() && shard->second->op_type() == "piper.Shard" &&
                 by_tensor.count(shard->second->inputs(0))) {
        // ZeRO-1/2: the update reads slice shard_index of the whole parameter (padded at its
        // end), and owns that slice of it.
        base = &held[by_tensor.at(shard->second->inputs(0))];
        const Attributes attributes(*shard->second);
        const int64_t index = attributes.require_int("shard_index");
        const plan::Tensor& part = plan.tensors(parameter);
        const int64_t k = num_elements(Shape(part.shape().begin(), part.shape().end()));
        const int64_t whole = base->slice.elements(base->shape);
        offset = std::min(index * k, whole);
        length = std::min(k, whole - offset);
        base->owned_offset = offset;
        base->owned_length = length;
        slice = base->owned_slice();
      } else {
        throw Error(what + " updates tensor '" + plan.tensors(parameter).name() +
                    "', which is neither a loaded parameter nor a ZeRO slice of one, so a "
                    "checkpoint cannot tell what part of the model it is");
      }
      for (int i = 2; i < update.inputs_size(); ++i) {
        // The other inputs are step values (the gradient norm), not state.
        if (update.inputs(i) < 0 ||
            plan.tensors(update.inputs(i)).role() != plan::OPTIMIZER_STATE) {
          continue;
        }
        HeldTensor state;
        state.name = plan.tensors(update.inputs(i)).name();
        state.tensor = update.inputs(i);
        state.dtype = plan.tensors(update.inputs(i)).dtype();
        state.shape = base->shape;
        state.slice = slice;
        state.owned_length = length;
        states.push_back(std::move(state));
      }
    }
  }
  held.insert(held.end(), states.begin(), states.end());
  return held;
}

}  // namespace piper::engine
