// Piper's one error style: exceptions carrying a message that names the input
// (file, JSON path, ONNX node, rank) and what to do. Mains print what() and
// exit non-zero.
#pragma once

#include <stdexcept>
#include <string>

namespace piper {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace piper
