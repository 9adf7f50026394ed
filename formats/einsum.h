// Einsum equations (ONNX Einsum, numpy.einsum): "ij,jk->ik". Parsed into one
// label per dimension of every operand, with the ellipsis expanded into its own
// labels and an implicit output ("ij,jk") made explicit. Shared by the planner's
// gradient rule and the engine's kernel.
#pragma once

#include <string>
#include <vector>

namespace piper::formats {

// Labels 0..25 are 'a'..'z', 26..51 'A'..'Z'; the ellipsis's dimensions get
// kEllipsisLabel + 0, 1, ... (leftmost first, right-aligned across operands).
constexpr int kEllipsisLabel = 52;

struct EinsumEquation {
  std::vector<std::vector<int>> inputs;  // per operand, one label per dimension
  std::vector<int> output;
};

// Parses `equation` for operands of the given ranks (whitespace is ignored). The implicit
// output is the ellipsis followed by the labels that occur once, in alphabetical order.
// Throws piper::Error naming the equation and the problem.
EinsumEquation parse_einsum(const std::string& equation, const std::vector<size_t>& ranks);

// The explicit equation for `labels`, the ellipsis's labels written as letters the
// equation does not use otherwise. Throws piper::Error when no letters are left.
std::string einsum_string(const EinsumEquation& equation);

}  // namespace piper::formats
