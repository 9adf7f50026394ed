// The readable form of a plan, for piper-dump and for tests: what each rank
// runs, one instruction per line.
#pragma once

#include <cstdint>
#include <string>

#include "schemas/plan.pb.h"

namespace piper::formats {

// The whole plan as text: header, memory summary, batch inputs, parameters,
// optimizer, loss terms, tensors, then each stream's instructions. Tolerates
// dangling tensor indices (printed as "<bad tensor N>") so a broken plan can
// still be inspected.
std::string plan_to_text(const plan::Plan& plan);

// The plan as JSON (protobuf's canonical mapping, proto field names, every
// field present), ending with a newline.
std::string plan_to_json(const plan::Plan& plan);

// One instruction, without the leading index, e.g.
//   "B  mb0  Gemm  /fc2/Gemm_grad_A  (dY f32[32,64], W f32[64,64]) -> (dX f32[32,64])"
// followed by "  {name=value, ...}" when the kernel has attributes.
std::string instruction_to_text(const plan::Plan& plan, const plan::Instruction& instruction);

// "f32[32,64]" ("f32[]" for a scalar; "i64[2,<=32@t7]" for a run-time extent that plan tensor 7
// holds).
std::string tensor_type_to_text(const plan::Tensor& tensor);

// "F", "B", "BI", "BW", "U" ("?" when unspecified).
std::string pass_to_text(plan::Pass pass);

// Binary units with three significant digits: "512 B", "1.50 KiB", "17.4 MiB".
std::string bytes_to_text(uint64_t bytes);

}  // namespace piper::formats
