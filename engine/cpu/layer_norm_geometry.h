// LayerNormalization's operands, checked once for every backend (engine/cpu/normalization.cc,
// engine/cuda/normalization_ops.cc).
#pragma once

#include <cstdint>
#include <string>

#include "engine/cpu/kernel_registry.h"

namespace piper::engine::cpu {

// X as [rows, n] with n the product of X's dimensions from `axis`.
struct LayerNormRows {
  int64_t rows = 1, n = 1;
  Shape stats;  // X's shape with 1 from axis on: Mean and InvStdDev
};

// Fails naming the axis when it is out of range for X.
LayerNormRows layer_norm_rows(const KernelArgs& args, const TensorView& x);

// Scale and bias (and their gradients) hold one value per normalized element (shape
// X.shape[axis:], as PyTorch exports them); fails naming `what` otherwise.
void check_affine(const KernelArgs& args, const TensorView& x, const LayerNormRows& v,
                  const TensorView& t, const std::string& what);

// Mean and InvStdDev hold one value per row; fails naming `what` otherwise.
void check_stats(const KernelArgs& args, const TensorView& t, const LayerNormRows& v,
                 const std::string& what);

// LayerNormalization(X, Scale[, B]) -> Y[, Mean[, InvStdDev]], every operand checked.
LayerNormRows check_layer_norm(const KernelArgs& args);

// piper.LayerNormalizationGrad(dY, X, Scale, Mean, InvStdDev) -> dX, dScale, dBias (each
// optional), every operand checked.
LayerNormRows check_layer_norm_grad(const KernelArgs& args);

}  // namespace piper::engine::cpu
