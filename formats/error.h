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

// Training stopped because a value became NaN or infinite; piper-run exits 3 on it. When
// `every_rank` is set, every rank of the run found the same (the global loss), so none needs
// telling.
class NonFiniteError : public Error {
 public:
  NonFiniteError(const std::string& message, bool every_rank)
      : Error(message), every_rank_(every_rank) {}
  bool every_rank() const { return every_rank_; }

 private:
  bool every_rank_;
};

}  // namespace piper
