#include "formats/plan_text.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <sstream>
#include <string_view>
#include <vector>

#include "formats/error.h"
#include "formats/lr_schedule.h"

namespace piper::formats {
namespace {

std::string number_to_text(double value) {
  std::array<char, 32> buffer{};
  const auto [end, error] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  return error == std::errc() ? std::string(buffer.data(), end) : std::string("?");
}

std::string dtype_to_text(plan::DType dtype) {
  switch (dtype) {
    case plan::FLOAT32:
      return "f32";
    case plan::INT64:
      return "i64";
    case plan::BOOL:
      return "bool";
    case plan::BFLOAT16:
      return "bf16";
    default:
      return "?";
  }
}

std::string role_to_text(plan::Role role) {
  switch (role) {
    case plan::INPUT:
      return "input";
    case plan::ACTIVATION:
      return "activation";
    case plan::PARAMETER:
      return "parameter";
    case plan::GRADIENT:
      return "gradient";
    case plan::OPTIMIZER_STATE:
      return "optimizer-state";
    case plan::LOSS:
      return "loss";
    case plan::CONSTANT:
      return "constant";
    default:
      return "?";
  }
}

std::string microbatch_to_text(int32_t microbatch) {
  return microbatch < 0 ? std::string("mb*") : "mb" + std::to_string(microbatch);
}

// "name f32[32,64]", "-" for an omitted optional operand.
std::string operand_to_text(const plan::Plan& plan, int32_t index) {
  if (index == -1) {
    return "-";
  }
  if (index < 0 || index >= plan.tensors_size()) {
    return "<bad tensor " + std::to_string(index) + ">";
  }
  const plan::Tensor& tensor = plan.tensors(index);
  return tensor.name() + " " + tensor_type_to_text(tensor);
}

std::string operands_to_text(const plan::Plan& plan,
                             const google::protobuf::RepeatedField<int32_t>& indices) {
  std::string text = "(";
  for (int i = 0; i < indices.size(); ++i) {
    text += (i ? ", " : "") + operand_to_text(plan, indices.Get(i));
  }
  return text + ")";
}

std::string attribute_to_text(const plan::Attribute& attribute) {
  std::string text = attribute.name() + "=";
  switch (attribute.value_case()) {
    case plan::Attribute::kI:
      return text + std::to_string(attribute.i());
    case plan::Attribute::kF:
      return text + number_to_text(attribute.f());
    case plan::Attribute::kS:
      return text + "\"" + attribute.s() + "\"";
    case plan::Attribute::kInts: {
      text += "[";
      const auto& values = attribute.ints().values();
      for (int i = 0; i < values.size(); ++i) {
        text += (i ? "," : "") + std::to_string(values.Get(i));
      }
      return text + "]";
    }
    case plan::Attribute::kFloats: {
      text += "[";
      const auto& values = attribute.floats().values();
      for (int i = 0; i < values.size(); ++i) {
        text += (i ? "," : "") + number_to_text(values.Get(i));
      }
      return text + "]";
    }
    default:
      return text + "?";
  }
}

std::string collective_kind_to_text(plan::Collective::Kind kind) {
  switch (kind) {
    case plan::Collective::ALL_REDUCE:
      return "all-reduce";
    case plan::Collective::REDUCE_SCATTER:
      return "reduce-scatter";
    case plan::Collective::ALL_GATHER:
      return "all-gather";
    case plan::Collective::BROADCAST:
      return "broadcast";
    case plan::Collective::ALL_TO_ALL:
      return "all-to-all";
    case plan::Collective::ALL_TO_ALL_V:
      return "all-to-all-v";
    case plan::Collective::ALL_TO_ALL_V_RETURN:
      return "all-to-all-v-return";
    default:
      return "collective(" + std::to_string(static_cast<int>(kind)) + ")";
  }
}

std::string ranks_to_text(const plan::CommGroup& group) {
  std::string text = "[";
  for (int i = 0; i < group.ranks_size(); ++i) {
    text += (i ? "," : "") + std::to_string(group.ranks(i));
  }
  return text + "]";
}

// "group 2 ranks [0,1]"; "group 2 <unknown>" when the plan does not define it.
std::string group_to_text(const plan::Plan& plan, int32_t id) {
  for (const plan::CommGroup& group : plan.groups()) {
    if (group.id() == id) {
      return "group " + std::to_string(id) + " ranks " + ranks_to_text(group);
    }
  }
  return "group " + std::to_string(id) + " <unknown>";
}

std::string pad(std::string text, size_t width) {
  if (text.size() < width) {
    text.append(width - text.size(), ' ');
  }
  return text;
}

std::string pad_left(std::string text, size_t width) {
  if (text.size() < width) {
    text.insert(0, width - text.size(), ' ');
  }
  return text;
}

// "  label    value\n" with the values aligned.
void field(std::ostringstream& out, std::string_view label, const std::string& value) {
  out << "  " << pad(std::string(label), 17) << value << '\n';
}

std::string sized(uint64_t bytes) {
  return bytes < 1024 ? bytes_to_text(bytes)
                      : bytes_to_text(bytes) + " (" + std::to_string(bytes) + " B)";
}

void write_header(std::ostringstream& out, const plan::Plan& plan) {
  const plan::Header& header = plan.header();
  out << "plan: rank " << header.rank() << " of " << header.world_size() << '\n';
  field(out, "format version", std::to_string(header.format_version()));
  field(out, "plan id", header.plan_id());
  field(out, "model", header.model_path());
  for (const plan::ExternalFile& file : header.external_files()) {
    field(out, "external data", file.location() + ", " + sized(file.size()));
  }
  field(out, "planner", header.planner_version());
  field(out, "global batch", std::to_string(plan.global_batch()));
  size_t instructions = 0;
  for (const plan::Stream& stream : plan.streams()) {
    instructions += static_cast<size_t>(stream.instructions_size());
  }
  field(out, "streams",
        std::to_string(plan.streams_size()) + " (" + std::to_string(instructions) +
            " instructions, " + std::to_string(plan.num_events()) + " events)");
}

void write_memory(std::ostringstream& out, const plan::Plan& plan) {
  const plan::MemorySummary& memory = plan.memory();
  out << "\nmemory: arena " << sized(memory.arena_bytes()) << '\n';
  field(out, "parameters", sized(memory.parameter_bytes()));
  field(out, "gradients", sized(memory.gradient_bytes()));
  field(out, "optimizer state", sized(memory.optimizer_bytes()));
  field(out, "activations peak", sized(memory.activation_bytes()));
  field(out, "batch inputs", sized(memory.input_bytes()));
}

// "TENSOR TYPE" when the tensor carries the source's name, else "SOURCE -> TENSOR TYPE".
std::string source_to_text(const plan::Plan& plan, const std::string& source, int32_t tensor) {
  const bool same =
      tensor >= 0 && tensor < plan.tensors_size() && plan.tensors(tensor).name() == source;
  return (same ? "" : source + " -> ") + operand_to_text(plan, tensor);
}

void write_inputs(std::ostringstream& out, const plan::Plan& plan) {
  out << "\nbatch inputs (" << plan.inputs_size() << "):\n";
  for (const plan::BatchInput& input : plan.inputs()) {
    out << "  " << source_to_text(plan, input.input(), input.tensor()) << "  rows ["
        << input.sample_offset() << ", " << input.sample_offset() + input.samples()
        << ") of each step's " << plan.global_batch();
    if (input.int_high() > 0) {
      out << "  synthetic values in [0, " << input.int_high() << ")";
    }
    out << '\n';
  }
  for (const plan::LabelCount& count : plan.label_counts()) {
    out << "  " << operand_to_text(plan, count.tensor()) << "  entries of " << count.input()
        << " other than " << count.ignore_index() << " in each step's " << plan.global_batch()
        << " rows";
    if (count.window_size() > 0) {
      out << ", of each sample the window (start, step, count)";
      for (const plan::CountWindow& window : count.window()) {
        out << " (" << window.start() << ", " << window.step() << ", " << window.count() << ")";
      }
    }
    out << '\n';
  }
}

// The group's members hold equal consecutive blocks, so the dimension's extent is theirs summed.
void write_block(std::ostringstream& out, const plan::Plan& plan,
                 const plan::ParameterBlock& block) {
  out << "  block: dim " << block.dim() << " [" << block.start() << ", "
      << block.start() + block.size() << ")";
  const auto group =
      std::find_if(plan.groups().begin(), plan.groups().end(),
                   [&](const plan::CommGroup& g) { return g.id() == block.group(); });
  if (group != plan.groups().end()) out << " of " << block.size() * group->ranks_size();
  out << ", group " << block.group();
  if (group == plan.groups().end()) out << " <unknown>";
}

void write_parameters(std::ostringstream& out, const plan::Plan& plan) {
  out << "\nparameters loaded from the model (" << plan.parameters_size() << "):\n";
  for (const plan::ParameterLoad& parameter : plan.parameters()) {
    out << "  " << source_to_text(plan, parameter.initializer(), parameter.tensor());
    if (parameter.tensor() >= 0 && parameter.tensor() < plan.tensors_size()) {
      out << "  " << role_to_text(plan.tensors(parameter.tensor()).role());
    }
    if (parameter.has_block()) write_block(out, plan, parameter.block());
    if (parameter.has_shard()) {
      const plan::ParameterShard& shard = parameter.shard();
      out << "  shard: elements [" << shard.element_offset() << ", "
          << shard.element_offset() + shard.element_count() << ") of " << shard.elements()
          << ", group " << shard.group();
    }
    out << '\n';
  }
  if (plan.constants_size() > 0) {
    uint64_t bytes = 0;
    for (const plan::ConstantValue& constant : plan.constants()) {
      bytes += constant.data().size();
    }
    out << "  + " << plan.constants_size() << " planner constants (" << bytes_to_text(bytes)
        << ")\n";
  }
}

void write_optimizer(std::ostringstream& out, const plan::Plan& plan) {
  const plan::Optimizer& optimizer = plan.optimizer();
  out << "\noptimizer: " << (optimizer.type().empty() ? "(none)" : optimizer.type());
  const auto setting = [&out](std::string_view name, double value) {
    out << "  " << name << "=" << number_to_text(value);
  };
  setting("lr", optimizer.lr());
  if (optimizer.type() == "adamw") {
    out << "  betas=(" << number_to_text(optimizer.beta1()) << ", "
        << number_to_text(optimizer.beta2()) << ")";
    setting("eps", optimizer.eps());
  } else {
    setting("momentum", optimizer.momentum());
    setting("dampening", optimizer.dampening());
    out << "  nesterov=" << (optimizer.nesterov() ? "true" : "false");
  }
  setting("weight_decay", optimizer.weight_decay());
  const formats::LrSchedule schedule = formats::lr_schedule_of(optimizer);
  if (schedule != formats::LrSchedule{}) {
    out << "  lr_schedule=" << schedule.type << "(warmup_steps=" << schedule.warmup_steps
        << ", total_steps=" << schedule.total_steps
        << ", min_lr_ratio=" << number_to_text(schedule.min_lr_ratio) << ")";
  }
  if (optimizer.clip_grad_norm() > 0) setting("clip_grad_norm", optimizer.clip_grad_norm());
  out << '\n';
  out << "loss: ";
  if (plan.loss_size() == 0) {
    out << "(none)";
  }
  for (int i = 0; i < plan.loss_size(); ++i) {
    out << (i ? " + " : "") << number_to_text(plan.loss(i).weight()) << " * "
        << operand_to_text(plan, plan.loss(i).tensor());
  }
  out << '\n';
  if (plan.has_gradient_norm()) {
    const plan::GradientNorm& norm = plan.gradient_norm();
    out << "gradient norm: " << operand_to_text(plan, norm.norm()) << ", this rank's share from";
    if (norm.gradients_size() == 0) out << " (none)";
    for (int i = 0; i < norm.gradients_size(); ++i) {
      out << (i ? ", " : " ") << norm.gradients(i).parameter();
    }
    out << '\n';
  }
}

void write_tensors(std::ostringstream& out, const plan::Plan& plan) {
  out << "\ntensors (" << plan.tensors_size() << "):\n";
  std::vector<std::array<std::string, 7>> rows = {
      {"#", "name", "type", "role", "mb", "offset", "size"}};
  for (int i = 0; i < plan.tensors_size(); ++i) {
    const plan::Tensor& tensor = plan.tensors(i);
    rows.push_back({std::to_string(i), tensor.name(), tensor_type_to_text(tensor),
                    role_to_text(tensor.role()), microbatch_to_text(tensor.microbatch()),
                    std::to_string(tensor.offset()), bytes_to_text(tensor.bytes())});
  }
  std::array<size_t, 7> widths{};
  for (const auto& row : rows) {
    for (size_t column = 0; column < row.size(); ++column) {
      widths[column] = std::max(widths[column], row[column].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t column = 0; column < row.size(); ++column) {
      // Numbers right-aligned, words left-aligned.
      const bool numeric = column == 0 || column == 5 || column == 6;
      line += "  " +
              (numeric ? pad_left(row[column], widths[column]) : pad(row[column], widths[column]));
    }
    while (!line.empty() && line.back() == ' ') {
      line.pop_back();
    }
    out << line << '\n';
  }
}

void write_stream(std::ostringstream& out, const plan::Plan& plan, const plan::Stream& stream) {
  out << "\nstream '" << stream.name() << "' (" << stream.instructions_size() << " instructions"
      << (stream.background() ? ", background" : "") << "):\n";
  const size_t width = std::to_string(std::max(stream.instructions_size() - 1, 0)).size();
  for (int i = 0; i < stream.instructions_size(); ++i) {
    out << "  " << pad_left(std::to_string(i), width) << " "
        << instruction_to_text(plan, stream.instructions(i)) << '\n';
  }
}

}  // namespace

std::string tensor_type_to_text(const plan::Tensor& tensor) {
  std::string text = dtype_to_text(tensor.dtype()) + "[";
  for (int i = 0; i < tensor.shape_size(); ++i) {
    text += (i ? "," : "") + std::to_string(tensor.shape(i));
    // A run-time extent: "<=bound@t7", or "<=bound@3*t7", where t7 holds the count.
    for (const plan::DynamicDim& dim : tensor.dynamic_dims()) {
      if (dim.dim() != i) continue;
      text.insert(text.size() - std::to_string(tensor.shape(i)).size(), "<=");
      text += "@" + (dim.scale() != 1 ? std::to_string(dim.scale()) + "*" : std::string()) + "t" +
              std::to_string(dim.extent());
    }
  }
  return text + "]";
}

std::string pass_to_text(plan::Pass pass) {
  switch (pass) {
    case plan::FORWARD:
      return "F";
    case plan::BACKWARD:
      return "B";
    case plan::BACKWARD_INPUT:
      return "BI";
    case plan::BACKWARD_WEIGHT:
      return "BW";
    case plan::UPDATE:
      return "U";
    default:
      return "?";
  }
}

std::string bytes_to_text(uint64_t bytes) {
  static constexpr std::array<const char*, 6> kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) {
    return std::to_string(bytes) + " B";
  }
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < kUnits.size()) {
    value /= 1024;
    ++unit;
  }
  // Three significant digits; rounding may carry into the next power of ten.
  const int decimals = value < 9.995 ? 2 : value < 99.95 ? 1 : 0;
  std::array<char, 32> buffer{};
  std::snprintf(buffer.data(), buffer.size(), "%.*f %s", decimals, value, kUnits[unit]);
  return buffer.data();
}

std::string instruction_to_text(const plan::Plan& plan, const plan::Instruction& instruction) {
  std::string text =
      pad(pass_to_text(instruction.pass()), 2) + " " + microbatch_to_text(instruction.microbatch());
  const auto with_label = [&](const std::string& op) {
    std::string line = text + "  " + op;
    if (!instruction.label().empty()) {
      line += "  " + instruction.label();
    }
    return line;
  };
  switch (instruction.body_case()) {
    case plan::Instruction::kKernel: {
      const plan::Kernel& kernel = instruction.kernel();
      std::string line = with_label(kernel.op_type()) + "  " +
                         operands_to_text(plan, kernel.inputs()) + " -> " +
                         operands_to_text(plan, kernel.outputs());
      if (kernel.attributes_size() > 0) {
        line += "  {";
        for (int i = 0; i < kernel.attributes_size(); ++i) {
          line += (i ? ", " : "") + attribute_to_text(kernel.attributes(i));
        }
        line += "}";
      }
      return line;
    }
    case plan::Instruction::kRecord:
      return with_label("record") + "  event " + std::to_string(instruction.record().event());
    case plan::Instruction::kWait:
      return with_label("wait") + "  event " + std::to_string(instruction.wait().event());
    case plan::Instruction::kCollective: {
      const plan::Collective& collective = instruction.collective();
      std::string line = with_label(collective_kind_to_text(collective.kind())) + "  " +
                         group_to_text(plan, collective.group()) + "  " +
                         operands_to_text(plan, collective.inputs()) + " -> " +
                         operands_to_text(plan, collective.outputs());
      if (collective.kind() == plan::Collective::BROADCAST) {
        line += "  {root=" + std::to_string(collective.root()) + "}";
      } else if (collective.average()) {
        line += "  {average}";
      }
      return line;
    }
    case plan::Instruction::kSend:
      return with_label("send") + "  " + operand_to_text(plan, instruction.send().tensor()) +
             " -> rank " + std::to_string(instruction.send().peer()) +
             "  {tag=" + std::to_string(instruction.send().tag()) + "}";
    case plan::Instruction::kRecv:
      return with_label("recv") + "  " + operand_to_text(plan, instruction.recv().tensor()) +
             " <- rank " + std::to_string(instruction.recv().peer()) +
             "  {tag=" + std::to_string(instruction.recv().tag()) + "}";
    default:
      return with_label("<empty instruction>");
  }
}

std::string plan_to_text(const plan::Plan& plan) {
  std::ostringstream out;
  write_header(out, plan);
  write_memory(out, plan);
  write_inputs(out, plan);
  write_parameters(out, plan);
  write_optimizer(out, plan);
  if (plan.groups_size() > 0) {
    out << "\ncommunicator groups (" << plan.groups_size() << "):\n";
    for (const plan::CommGroup& group : plan.groups()) {
      out << "  " << group.id() << ": ranks " << ranks_to_text(group) << '\n';
    }
  }
  write_tensors(out, plan);
  for (const plan::Stream& stream : plan.streams()) {
    write_stream(out, plan, stream);
  }
  return std::move(out).str();
}

std::string plan_to_json(const plan::Plan& plan) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(plan, &json, options);
  if (!status.ok()) {
    throw Error("cannot print the plan as JSON: " + std::string(status.message()));
  }
  if (json.empty() || json.back() != '\n') {
    json += '\n';
  }
  return json;
}

}  // namespace piper::formats
