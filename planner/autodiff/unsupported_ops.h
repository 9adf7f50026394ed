// What a user can do about an op type the planner cannot train through: the advice
// check_supported_ops() prints beside each unsupported op type.
#pragma once

#include <string>

namespace piper::planner {

// "not yet supported; ..." for ops Piper plans to add, an export setting or a rewrite where
// one avoids the op, and a general suggestion otherwise. `type` is the IR's op type
// ("domain.Op" outside the default ONNX domain).
std::string unsupported_op_advice(const std::string& type);

}  // namespace piper::planner
