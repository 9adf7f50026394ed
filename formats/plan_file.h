// The on-disk framing of a plan: magic, format version, length and checksum
// around a serialized piper.plan.Plan (docs/plan-format.md).
#pragma once

#include <string>
#include <string_view>

#include "schemas/plan.pb.h"

namespace piper::formats {

inline constexpr uint32_t kPlanFormatVersion = 2;  // 2: the payload checksum is CRC-32

// Serializes and writes atomically. Throws piper::Error naming the path.
void write_plan_file(const std::string& path, const plan::Plan& plan);

// Throws piper::Error naming the path when the file is missing, not a plan,
// truncated, corrupted (checksum) or of another format version.
plan::Plan read_plan_file(const std::string& path);
// The same for a plan file's bytes already read from `path`.
plan::Plan parse_plan_file(std::string_view bytes, const std::string& path);

}  // namespace piper::formats
