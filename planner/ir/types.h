// Vocabulary shared by both levels of the IR.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace piper::ir {

enum class DType { kFloat32, kInt64, kBool, kBFloat16 };
enum class Role { kInput, kActivation, kParameter, kGradient, kOptimizerState, kLoss, kConstant };
enum class Pass { kForward, kBackward, kBackwardInput, kBackwardWeight, kUpdate };

using TensorId = int;
using OpId = int;
using TaskId = int;
using Shape = std::vector<int64_t>;

// Tag name -> value, e.g. {"LAYER": 3}. Ordered, so tag tuples compare and print stably.
using Tags = std::map<std::string, int64_t>;

using AttributeValue =
    std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;
using Attributes = std::map<std::string, AttributeValue>;

size_t dtype_size(DType dtype);
// float32 or bfloat16: the dtypes gradients flow through.
bool is_float(DType dtype);
// The ONNX TensorProto data type of `dtype`: what Cast's `to` names.
int64_t onnx_data_type(DType dtype);
int64_t num_elements(const Shape& shape);

std::string to_string(DType dtype);
std::string to_string(Role role);
std::string to_string(Pass pass);  // "F", "B", "BI", "BW", "U"
std::string to_string(const Shape& shape);
std::string to_string(const Tags& tags);

// Inverses of to_string; throw std::invalid_argument naming the text.
DType parse_dtype(const std::string& text);
Role parse_role(const std::string& text);
Pass parse_pass(const std::string& text);

// Typed attribute lookup with a default for absent attributes.
int64_t attr_int(const Attributes& attrs, const std::string& name, int64_t fallback);
double attr_float(const Attributes& attrs, const std::string& name, double fallback);
std::string attr_string(const Attributes& attrs, const std::string& name,
                        const std::string& fallback);
std::vector<int64_t> attr_ints(const Attributes& attrs, const std::string& name);

}  // namespace piper::ir
