// What a rank's plan holds of the model's training state, in logical terms: each parameter and
// optimizer state tensor, the slice of the model's tensor it is (a tensor-parallel block, a ZeRO
// slice of it), and the part of it this rank owns for saving.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/runtime/session.h"
#include "formats/checkpoint_index.h"

namespace piper::engine {

struct HeldTensor {
  // The model's initializer ("fc1.weight"), or its optimizer state ("optim/fc1.weight/exp_avg").
  std::string name;
  int tensor = -1;  // the plan tensor; its first slice.elements(shape) elements hold the slice
  plan::DType dtype = plan::FLOAT32;
  std::vector<int64_t> shape;  // the logical tensor's
  formats::TensorSlice slice;
  // The part this rank saves: elements [owned_offset, owned_offset + owned_length) of the
  // tensor's data. Smaller than the slice where replicas hold a parameter whole but each
  // updates only its ZeRO slice of it.
  int64_t owned_offset = 0;
  int64_t owned_length = 0;

  // The slice of the logical tensor the owned part is.
  formats::TensorSlice owned_slice() const;
};

// Every parameter the plan trains (role PARAMETER) and every optimizer state tensor, found from
// the plan's parameter loads and its update kernels (piper.AdamW, piper.SGD: parameter,
// gradient, then inputs of role OPTIMIZER_STATE; a ZeRO-1/2 update takes its parameter's slice from
// a piper.Shard). Throws piper::Error naming a tensor whose slice cannot be told.
std::vector<HeldTensor> held_state(const Session& session);

// The safetensors dtype of a plan dtype.
std::string safetensors_dtype(plan::DType dtype);

}  // namespace piper::engine
