#include "engine/runtime/session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <unordered_map>

#include "engine/comm/self_communicator.h"
#include "engine/runtime/comm_ops.h"
#include "engine/runtime/dynamic_kernel.h"
#include "engine/runtime/finite_check.h"
#include "engine/runtime/host_staging.h"
#include "engine/runtime/label_count.h"
#include "engine/runtime/parameter_block.h"
#include "engine/runtime/parameter_exchange.h"
#include "formats/atomic_file.h"
#include "formats/checksum.h"
#include "formats/error.h"
#include "formats/onnx_model.h"

namespace piper::engine {
namespace {

std::string tensor_label(const plan::Plan& plan, int index) {
  return "tensor " + std::to_string(index) + " '" + plan.tensors(index).name() + "'";
}

plan::DType onnx_to_plan_dtype(int onnx_type) {
  switch (onnx_type) {
    case onnx::TensorProto::FLOAT:
      return plan::FLOAT32;
    case onnx::TensorProto::INT64:
      return plan::INT64;
    case onnx::TensorProto::BOOL:
      return plan::BOOL;
    case onnx::TensorProto::BFLOAT16:
      return plan::BFLOAT16;
    default:
      return plan::DTYPE_UNSPECIFIED;
  }
}

std::string instruction_where(const plan::Stream& stream, int index,
                              const plan::Instruction& instruction) {
  std::string where = "stream '" + stream.name() + "' instruction " + std::to_string(index);
  if (instruction.has_kernel()) {
    where += " (" + instruction.kernel().op_type();
    if (!instruction.label().empty()) where += " '" + instruction.label() + "'";
    where += ")";
  } else if (instruction.has_collective()) {
    where += " (" + plan::Collective::Kind_Name(instruction.collective().kind()) + " over group " +
             std::to_string(instruction.collective().group());
    if (!instruction.label().empty()) where += " '" + instruction.label() + "'";
    where += ")";
  } else if (!instruction.label().empty()) {
    where += " ('" + instruction.label() + "')";
  }
  return where;
}

}  // namespace

Session::Session(plan::Plan plan, std::unique_ptr<Backend> backend, SessionOptions options)
    : plan_(std::move(plan)), backend_(std::move(backend)), options_(options) {
  check_tensors();
  arena_bytes_ = plan_.memory().arena_bytes();
  arena_ = static_cast<uint8_t*>(backend_->allocate(arena_bytes_));
  try {
    write_constants();
    load_parameters();
    check_collectives();
    connect_communicators();
    executor_ = prepare_streams();
  } catch (...) {
    backend_->release(arena_);
    throw;
  }
}

Session::~Session() { backend_->release(arena_); }

void Session::check_tensors() {
  const uint64_t arena = plan_.memory().arena_bytes();
  for (int i = 0; i < plan_.tensors_size(); ++i) {
    const plan::Tensor& tensor = plan_.tensors(i);
    uint64_t bytes = 0;
    try {
      bytes =
          static_cast<uint64_t>(num_elements(Shape(tensor.shape().begin(), tensor.shape().end()))) *
          dtype_size(tensor.dtype());
    } catch (const Error& error) {
      throw Error(tensor_label(plan_, i) + ": " + error.what());
    }
    if (tensor.bytes() != bytes) {
      throw Error(tensor_label(plan_, i) + " has " + std::to_string(tensor.bytes()) +
                  " bytes but its shape and dtype need " + std::to_string(bytes));
    }
    if (tensor.offset() > arena || bytes > arena - tensor.offset()) {
      throw Error(tensor_label(plan_, i) + " at offset " + std::to_string(tensor.offset()) +
                  " with " + std::to_string(bytes) + " bytes lies outside the " +
                  std::to_string(arena) + "-byte arena");
    }
  }
  auto check_index = [&](int index, const std::string& what) {
    if (index < 0 || index >= plan_.tensors_size()) {
      throw Error(what + " refers to tensor " + std::to_string(index) + " but the plan has " +
                  std::to_string(plan_.tensors_size()) + " tensors");
    }
  };
  for (const auto& input : plan_.inputs()) {
    const std::string what = "batch input '" + input.input() + "'";
    check_index(input.tensor(), what);
    const plan::Tensor& tensor = plan_.tensors(input.tensor());
    if (tensor.shape_size() == 0 || tensor.shape(0) != input.samples()) {
      throw Error(what + " feeds " + std::to_string(input.samples()) + " samples into " +
                  tensor_label(plan_, input.tensor()) + " whose leading dimension is " +
                  (tensor.shape_size() ? std::to_string(tensor.shape(0)) : "missing"));
    }
    if (input.sample_offset() < 0 ||
        input.sample_offset() + input.samples() > plan_.global_batch()) {
      throw Error(what + " takes rows [" + std::to_string(input.sample_offset()) + ", " +
                  std::to_string(input.sample_offset() + input.samples()) +
                  ") outside the global batch of " + std::to_string(plan_.global_batch()));
    }
  }
  for (const auto& term : plan_.loss()) {
    check_index(term.tensor(), "a loss term");
    const plan::Tensor& tensor = plan_.tensors(term.tensor());
    if (tensor.dtype() != plan::FLOAT32 || tensor.bytes() != sizeof(float)) {
      throw Error("loss term " + tensor_label(plan_, term.tensor()) +
                  " must be a float32 scalar, but is " + dtype_name(tensor.dtype()) + " " +
                  shape_string(Shape(tensor.shape().begin(), tensor.shape().end())));
    }
  }
  for (const auto& count : plan_.label_counts()) {
    check_index(count.tensor(), "the label count of '" + count.input() + "'");
    const plan::Tensor& tensor = plan_.tensors(count.tensor());
    if (tensor.dtype() != plan::FLOAT32 || tensor.bytes() != sizeof(float)) {
      throw Error("the label count of '" + count.input() + "', " +
                  tensor_label(plan_, count.tensor()) + ", must be a float32 scalar");
    }
  }
  for (const auto& constant : plan_.constants()) check_index(constant.tensor(), "a constant");
  if (plan_.has_gradient_norm()) {
    const int norm = plan_.gradient_norm().norm();
    check_index(norm, "the gradient norm");
    if (plan_.tensors(norm).dtype() != plan::FLOAT32 || plan_.tensors(norm).bytes() != 4) {
      throw Error("the gradient norm " + tensor_label(plan_, norm) + " must be a float32 scalar");
    }
    for (const auto& gradient : plan_.gradient_norm().gradients()) {
      check_index(gradient.tensor(), "the gradient of '" + gradient.parameter() + "'");
    }
  }
  for (int i = 0; i < plan_.tensors_size(); ++i) {
    if (!plan_.tensors(i).zero_at_step_start()) continue;
    zeroed_.push_back(i);
    zeros_.resize(std::max<size_t>(zeros_.size(), plan_.tensors(i).bytes()), 0);
  }
  for (const auto& load : plan_.parameters()) {
    check_index(load.tensor(), "parameter '" + load.initializer() + "'");
  }
}

TensorView Session::view(int index) const {
  const plan::Tensor& tensor = plan_.tensors(index);
  return TensorView{arena_ + tensor.offset(), tensor.dtype(),
                    Shape(tensor.shape().begin(), tensor.shape().end())};
}

void Session::write_constants() {
  for (const auto& constant : plan_.constants()) {
    const plan::Tensor& tensor = plan_.tensors(constant.tensor());
    if (constant.data().size() != tensor.bytes()) {
      throw Error("constant for " + tensor_label(plan_, constant.tensor()) + " has " +
                  std::to_string(constant.data().size()) + " bytes, the tensor " +
                  std::to_string(tensor.bytes()));
    }
    backend_->upload(arena_ + tensor.offset(), constant.data().data(), constant.data().size());
  }
}

void Session::load_parameters() {
  if (plan_.parameters_size() == 0) {
    return;
  }
  const std::string& path = plan_.header().model_path();
  if (path.empty()) {
    throw Error("the plan loads " + std::to_string(plan_.parameters_size()) +
                " parameters but its header names no model_path");
  }
  const std::string bytes = formats::read_file(path);
  const uint64_t checksum = plan_.header().model_checksum();
  if (checksum != 0 && formats::fnv1a64(bytes) != checksum) {
    throw Error("model '" + path +
                "' changed after planning (its contents differ from what piper-plan read); "
                "re-plan with the model as it is now");
  }
  const onnx::ModelProto model = formats::parse_onnx_model(bytes, path);
  const formats::ExternalData external(model, path);
  formats::check_unchanged(external, plan_.header().external_files(), path);
  std::unordered_map<std::string, const onnx::TensorProto*> initializers;
  for (const auto& initializer : model.graph().initializer()) {
    initializers.emplace(initializer.name(), &initializer);
  }
  layouts_.clear();
  initializer_shapes_.clear();
  for (const auto& load : plan_.parameters()) {
    const std::string what = "initializer '" + load.initializer() + "' of model '" + path + "'";
    const auto found = initializers.find(load.initializer());
    if (found == initializers.end()) {
      throw Error(what + " does not exist (the plan loads it into " +
                  tensor_label(plan_, load.tensor()) +
                  "); the plan was made for another model, re-plan");
    }
    layouts_.push_back(load_parameter(load, *found->second, external, what));
    initializer_shapes_.emplace_back(found->second->dims().begin(), found->second->dims().end());
  }
}

BlockLayout Session::load_parameter(const plan::ParameterLoad& load,
                                    const onnx::TensorProto& initializer,
                                    const formats::ExternalData& external,
                                    const std::string& what) {
  const plan::Tensor& tensor = plan_.tensors(load.tensor());
  const Shape dims(initializer.dims().begin(), initializer.dims().end());
  const Shape shape(tensor.shape().begin(), tensor.shape().end());
  const plan::DType dtype = onnx_to_plan_dtype(initializer.data_type());
  const bool sharded = load.has_shard();
  const auto mismatch = [&](const std::string& held) {
    return Error(what + " is " +
                 (dtype == plan::DTYPE_UNSPECIFIED
                      ? "ONNX type " + std::to_string(initializer.data_type())
                      : dtype_name(dtype)) +
                 " " + shape_string(dims) + held + " but the plan's " +
                 tensor_label(plan_, load.tensor()) + " is " + dtype_name(tensor.dtype()) + " " +
                 (sharded ? "slice of " + std::to_string(load.shard().elements()) + " elements"
                          : shape_string(shape)) +
                 "; re-plan for this model");
  };
  if (dtype != tensor.dtype()) throw mismatch("");
  const size_t element = dtype_size(dtype);
  const uint64_t whole = static_cast<uint64_t>(num_elements(dims)) * element;
  // The tensor holds the block (or the whole initializer), or with a shard a slice of it.
  const BlockLayout layout =
      load.has_block() ? block_layout(dims, element, load.block(), what) : whole_layout(whole);
  const Shape held = load.has_block() ? block_shape(dims, load.block()) : dims;
  if (sharded ? num_elements(held) != load.shard().elements() : held != shape) {
    throw mismatch(load.has_block() ? ", whose block " + block_string(load.block()) + " is " +
                                          shape_string(held) + ","
                                    : "");
  }
  if (load.has_block()) check_block_group(load.block(), dims, what);
  // External data is read straight from its file, only the planned block and slice.
  const bool in_file = initializer.data_location() == onnx::TensorProto::EXTERNAL;
  const std::vector<uint8_t> bytes =
      in_file ? std::vector<uint8_t>() : formats::initializer_bytes(initializer);
  const uint64_t stored = in_file ? external.length(initializer) : bytes.size();
  if (stored != whole) {
    throw Error(what + " holds " + std::to_string(stored) + " bytes of data, its shape " +
                shape_string(dims) + " needs " + std::to_string(whole));
  }
  const uint64_t offset = sharded ? load.shard().element_offset() * element : 0;
  const uint64_t count = sharded ? load.shard().element_count() * element : layout.bytes();
  const bool negative =
      sharded && (load.shard().element_offset() < 0 || load.shard().element_count() < 0);
  if (negative || offset > layout.bytes() || count > layout.bytes() - offset ||
      count > tensor.bytes()) {
    throw Error(what + ": the plan loads elements [" + std::to_string(offset / element) + ", " +
                std::to_string((offset + count) / element) + ") of " +
                (load.has_block() ? "its block " + block_string(load.block()) : "it") + " into " +
                tensor_label(plan_, load.tensor()) + ", which do not fit; re-plan");
  }
  const RangeReader read = [&](uint64_t from, uint64_t size, const formats::ByteSink& sink) {
    if (in_file) {
      external.read(initializer, from, size, sink);
    } else {
      sink(bytes.data() + from, static_cast<size_t>(size));
    }
  };
  uint8_t* target = arena_ + tensor.offset();
  read_block(layout, offset, count, read, [&](const uint8_t* data, size_t size) {
    backend_->upload(target, data, size);
    target += size;
  });
  return layout;
}

// --save-onnx joins the group's blocks in group order, all of one size: this rank's block must
// be its member's share.
void Session::check_block_group(const plan::ParameterBlock& block, const Shape& dims,
                                const std::string& what) const {
  const int rank = static_cast<int>(plan_.header().rank());
  const std::string where = what + ": the plan gives rank " + std::to_string(rank) + " block " +
                            block_string(block) + " over group " + std::to_string(block.group());
  const auto group =
      std::find_if(plan_.groups().begin(), plan_.groups().end(),
                   [&](const plan::CommGroup& g) { return g.id() == block.group(); });
  if (group == plan_.groups().end()) {
    throw Error(where + ", which the plan does not define; re-plan");
  }
  const auto member = std::find(group->ranks().begin(), group->ranks().end(), rank);
  if (member == group->ranks().end()) {
    throw Error(where + ", which does not hold rank " + std::to_string(rank) + "; re-plan");
  }
  const int64_t index = member - group->ranks().begin(), members = group->ranks_size();
  const int64_t extent = dims[static_cast<size_t>(block.dim())];
  if (block.size() * members != extent || block.start() != index * block.size()) {
    throw Error(where + ", but its " + std::to_string(members) +
                " members hold consecutive blocks of one size in group order: member " +
                std::to_string(index) + "'s share of dim " + std::to_string(block.dim()) +
                " (extent " + std::to_string(extent) + ") is " +
                (extent % members == 0 ? "[" + std::to_string(index * (extent / members)) + ", " +
                                             std::to_string((index + 1) * (extent / members)) + ")"
                                       : "not a whole block (the extent does not divide)") +
                "; re-plan");
  }
}

std::unique_ptr<PreparedKernel> Session::prepare_kernel(const plan::Kernel& kernel,
                                                        std::vector<TensorView> inputs,
                                                        std::vector<TensorView> outputs) {
  std::vector<CheckedOutput> checked;
  if (options_.check_finite) {
    for (int k = 0; k < kernel.outputs_size(); ++k) {
      if (kernel.outputs(k) >= 0) {
        checked.push_back({tensor_label(plan_, kernel.outputs(k)), outputs[k]});
      }
    }
  }
  std::unique_ptr<PreparedKernel> prepared =
      backend_->prepare(kernel, std::move(inputs), std::move(outputs));
  if (!options_.check_finite) return prepared;
  return check_finite_outputs(std::move(prepared), std::move(checked), *backend_);
}

// The run-time extents of a kernel's tensors, inputs first; empty for a kernel of fixed shapes.
// An extent the kernel writes itself (NonZero's count) leaves its output at the bound.
std::vector<RunTimeExtent> Session::run_time_extents(const plan::Kernel& kernel) const {
  std::vector<RunTimeExtent> extents;
  std::vector<int> tensors(kernel.inputs().begin(), kernel.inputs().end());
  tensors.insert(tensors.end(), kernel.outputs().begin(), kernel.outputs().end());
  for (size_t view = 0; view < tensors.size(); ++view) {
    if (tensors[view] < 0) continue;
    const plan::Tensor& tensor = plan_.tensors(tensors[view]);
    for (const plan::DynamicDim& dim : tensor.dynamic_dims()) {
      const bool valid_extent = dim.extent() >= 0 && dim.extent() < plan_.tensors_size() &&
                                plan_.tensors(dim.extent()).dtype() == plan::INT64 &&
                                plan_.tensors(dim.extent()).shape_size() == 0;
      if (dim.dim() < 0 || dim.dim() >= tensor.shape_size() || dim.scale() < 1 || !valid_extent) {
        throw Error("tensor '" + tensor.name() + "' has a malformed dynamic dimension " +
                    std::to_string(dim.dim()) + " (extent tensor " + std::to_string(dim.extent()) +
                    ", scale " + std::to_string(dim.scale()) +
                    "); re-plan with this build's piper-plan");
      }
      const auto& written = kernel.outputs();
      if (std::find(written.begin(), written.end(), dim.extent()) != written.end()) continue;
      extents.push_back({tensor.name(), view, dim.dim(),
                         arena_ + plan_.tensors(dim.extent()).offset(), dim.scale()});
    }
  }
  return extents;
}

std::unique_ptr<Executor> Session::prepare_streams() {
  std::vector<ExecStream> streams;
  for (const auto& stream : plan_.streams()) {
    ExecStream exec{stream.name(), {}, stream.background()};
    for (int i = 0; i < stream.instructions_size(); ++i) {
      const plan::Instruction& instruction = stream.instructions(i);
      ExecInstruction exec_instruction;
      exec_instruction.where = instruction_where(stream, i, instruction);
      switch (instruction.body_case()) {
        case plan::Instruction::kKernel: {
          const plan::Kernel& kernel = instruction.kernel();
          auto views = [&](const auto& indices, const char* kind) {
            std::vector<TensorView> result;
            for (int index : indices) {
              if (index == -1) {
                result.emplace_back();
              } else if (index < 0 || index >= plan_.tensors_size()) {
                throw Error(exec_instruction.where + ": " + kind + " tensor index " +
                            std::to_string(index) + " is out of range (the plan has " +
                            std::to_string(plan_.tensors_size()) + " tensors)");
              } else {
                result.push_back(view(index));
              }
            }
            return result;
          };
          std::vector<TensorView> inputs = views(kernel.inputs(), "input");
          std::vector<TensorView> outputs = views(kernel.outputs(), "output");
          KernelPreparer prepare = [this, &kernel](std::vector<TensorView> in,
                                                   std::vector<TensorView> out) {
            return prepare_kernel(kernel, std::move(in), std::move(out));
          };
          try {
            std::vector<RunTimeExtent> extents = run_time_extents(kernel);
            exec_instruction.kernel =
                extents.empty()
                    ? prepare(std::move(inputs), std::move(outputs))
                    : prepare_with_extents(*backend_, std::move(inputs), std::move(outputs),
                                           std::move(extents), std::move(prepare));
          } catch (const std::exception& error) {
            throw Error(exec_instruction.where + ": " + error.what());
          }
          break;
        }
        case plan::Instruction::kRecord:
          exec_instruction.kind = ExecInstruction::Kind::kRecord;
          exec_instruction.event = instruction.record().event();
          break;
        case plan::Instruction::kWait:
          exec_instruction.kind = ExecInstruction::Kind::kWait;
          exec_instruction.event = instruction.wait().event();
          break;
        case plan::Instruction::kCollective:
        case plan::Instruction::kSend:
        case plan::Instruction::kRecv:
          try {
            exec_instruction.kernel = prepare_comm(instruction, stream.name());
          } catch (const std::exception& error) {
            throw Error(exec_instruction.where + ": " + error.what());
          }
          break;
        default:
          throw Error(exec_instruction.where + " is empty (no kernel, event or transfer)");
      }
      exec.instructions.push_back(std::move(exec_instruction));
    }
    streams.push_back(std::move(exec));
  }
  for (auto& [key, buffer] : fusion_) buffer->allocate();
  std::unique_ptr<DeviceStreams> device =
      backend_->make_device_streams(streams.size(), plan_.num_events());
  return std::make_unique<Executor>(
      std::move(streams), plan_.num_events(), [this] { abort_communicators(); }, std::move(device));
}

void Session::connect_communicators() {
  const int me = static_cast<int>(plan_.header().rank());
  const int world = std::max(static_cast<int>(plan_.header().world_size()), 1);
  const std::string rank_of = "rank " + std::to_string(me) + " of " + std::to_string(world);
  if (me >= world) {
    throw Error("the plan's header says " + rank_of + "; re-plan with a matching piper-plan");
  }
  auto factory = [&](const std::string& what) -> CommunicatorFactory& {
    if (options_.communicators == nullptr) {
      throw Error(rank_of + ": " + what +
                  " needs communicators, which piper-run connects through a rendezvous "
                  "(--rendezvous or the launcher's environment)");
    }
    return *options_.communicators;
  };
  // Groups by id, then peers by rank: every rank connects in this order, so connecting (a
  // barrier per group) cannot deadlock.
  std::map<int, const plan::CommGroup*> groups;
  for (const auto& group : plan_.groups()) {
    const std::string what = "group " + std::to_string(group.id());
    if (!groups.emplace(group.id(), &group).second) {
      throw Error("the plan defines " + what + " twice");
    }
    if (group.ranks_size() == 0) throw Error(what + " has no ranks");
    std::set<int> members;
    for (int rank : group.ranks()) {
      if (rank < 0 || rank >= world || !members.insert(rank).second) {
        throw Error(what + " lists rank " + std::to_string(rank) +
                    (rank < 0 || rank >= world ? ", outside the world size " + std::to_string(world)
                                               : " twice"));
      }
    }
  }
  for (const auto& [id, group] : groups) {
    const std::vector<int> ranks(group->ranks().begin(), group->ranks().end());
    if (std::find(ranks.begin(), ranks.end(), me) == ranks.end()) continue;
    const std::string what = "group " + std::to_string(id);
    if (ranks.size() == 1) {
      groups_[id] = backend_->host_memory()
                        ? std::make_unique<SelfCommunicator>()
                        : std::make_unique<SelfCommunicator>(
                              [backend = backend_.get()](void* dst, const void* src, size_t n) {
                                backend->copy(dst, src, n);
                              });
    } else {
      groups_[id] = factory(what).connect(what, ranks);
    }
  }
  std::set<int> peers;
  for (const auto& stream : plan_.streams()) {
    for (const auto& instruction : stream.instructions()) {
      if (!instruction.has_send() && !instruction.has_recv()) continue;
      const int peer =
          instruction.has_send() ? instruction.send().peer() : instruction.recv().peer();
      if (peer < 0 || peer >= world || peer == me) {
        throw Error("stream '" + stream.name() + "': a " +
                    (instruction.has_send() ? "send to" : "recv from") + " rank " +
                    std::to_string(peer) + ", which is not another rank of the " +
                    std::to_string(world) + " (this is rank " + std::to_string(me) + ")");
      }
      peers.insert(peer);
    }
  }
  for (int peer : peers) {
    const int low = std::min(me, peer), high = std::max(me, peer);
    const std::string what = "pair " + std::to_string(low) + "-" + std::to_string(high);
    peers_[peer] =
        factory("send/recv with rank " + std::to_string(peer)).connect(what, {low, high});
  }
}

Communicator& Session::channel(const std::string& key, Communicator& communicator,
                               const std::string& stream) {
  std::unique_ptr<Communicator>& channel = channels_[{key, stream}];
  if (!channel) channel = communicator.channel(stream);
  return *channel;
}

FusionBuffer& Session::fusion_buffer(const std::string& stream, Backend& memory) {
  std::unique_ptr<FusionBuffer>& buffer = fusion_[{stream, &memory}];
  if (!buffer) buffer = std::make_unique<FusionBuffer>(memory);
  return *buffer;
}

uint64_t Session::fusion_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [key, buffer] : fusion_) {
    if (key.second == backend_.get()) bytes += buffer->bytes();
  }
  return bytes;
}

void Session::abort_communicators() {
  for (auto& [id, communicator] : groups_) communicator->abort();
  for (auto& [peer, communicator] : peers_) communicator->abort();
}

CommTensor Session::comm_tensor(int index, const char* what) const {
  if (index < 0 || index >= plan_.tensors_size()) {
    throw Error(std::string(what) + " tensor index " + std::to_string(index) +
                " is out of range (the plan has " + std::to_string(plan_.tensors_size()) +
                " tensors)");
  }
  return CommTensor{view(index), tensor_label(plan_, index)};
}

void Session::check_collectives() const {
  for (const plan::Stream& stream : plan_.streams()) {
    for (int i = 0; i < stream.instructions_size(); ++i) {
      const plan::Instruction& instruction = stream.instructions(i);
      if (!instruction.has_collective()) continue;
      const plan::Collective& collective = instruction.collective();
      for (const plan::CommGroup& group : plan_.groups()) {
        if (group.id() != collective.group()) continue;
        try {
          std::vector<CommTensor> inputs, outputs;
          for (int index : collective.inputs()) inputs.push_back(comm_tensor(index, "input"));
          for (int index : collective.outputs()) outputs.push_back(comm_tensor(index, "output"));
          check_collective(collective, std::move(inputs), std::move(outputs),
                           static_cast<size_t>(group.ranks_size()));
        } catch (const std::exception& error) {
          throw Error(instruction_where(stream, i, instruction) + ": " + error.what());
        }
      }
    }
  }
}

std::unique_ptr<PreparedKernel> Session::prepare_comm(const plan::Instruction& instruction,
                                                      const std::string& stream) {
  Communicator* link = nullptr;
  int member = 0;  // the peer's member index in a send/recv pair
  std::vector<CommTensor> inputs, outputs;
  if (instruction.has_collective()) {
    const plan::Collective& collective = instruction.collective();
    const auto group = groups_.find(collective.group());
    if (group == groups_.end()) {
      bool defined = false;
      for (const auto& candidate : plan_.groups()) defined |= candidate.id() == collective.group();
      throw Error("collective over group " + std::to_string(collective.group()) + ", " +
                  (defined ? "which does not hold rank " + std::to_string(plan_.header().rank())
                           : std::string("which the plan does not define")));
    }
    for (int index : collective.inputs()) inputs.push_back(comm_tensor(index, "input"));
    for (int index : collective.outputs()) outputs.push_back(comm_tensor(index, "output"));
    link = &channel("group " + std::to_string(collective.group()), *group->second, stream);
  } else {
    const bool is_send = instruction.has_send();
    const int peer = is_send ? instruction.send().peer() : instruction.recv().peer();
    (is_send ? inputs : outputs)
        .push_back(comm_tensor(is_send ? instruction.send().tensor() : instruction.recv().tensor(),
                               "transfer"));
    link = &channel("peer " + std::to_string(peer), *peers_.at(peer), stream);
    member = peer < static_cast<int>(plan_.header().rank()) ? 0 : 1;
  }
  // The kernel on tensors where `link` reads them, and the backend that copies them there.
  auto prepare = [&](std::vector<CommTensor> in, std::vector<CommTensor> out,
                     Backend& memory) -> std::unique_ptr<PreparedKernel> {
    if (instruction.has_collective()) {
      return prepare_collective(instruction.collective(), std::move(in), std::move(out), *link,
                                memory, fusion_buffer(stream, memory));
    }
    if (instruction.has_send()) {
      return prepare_send(std::move(in.at(0)), member, instruction.send().tag(), *link);
    }
    return prepare_recv(std::move(out.at(0)), member, instruction.recv().tag(), *link);
  };
  if (!link->host_buffers() || backend_->host_memory()) {
    return prepare(std::move(inputs), std::move(outputs), *backend_);
  }
  // A host communicator (Gloo) with a device backend: the transfer goes through host copies.
  if (!host_memory_) host_memory_ = make_backend("cpu");
  auto views = [](const std::vector<CommTensor>& tensors) {
    std::vector<TensorView> result;
    for (const CommTensor& tensor : tensors) result.push_back(tensor.view);
    return result;
  };
  auto relabel = [](std::vector<CommTensor> tensors, std::vector<TensorView> host) {
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].view = host[i];
    return tensors;
  };
  return prepare_on_host(*backend_, views(inputs), views(outputs),
                         [&](std::vector<TensorView> host_in, std::vector<TensorView> host_out) {
                           return prepare(relabel(inputs, std::move(host_in)),
                                          relabel(outputs, std::move(host_out)), *host_memory_);
                         });
}

void Session::upload_input(const plan::BatchInput& input, const Batch& batch) {
  const auto found = batch.find(input.input());
  if (found == batch.end()) {
    throw Error("the batch has no input '" + input.input() + "', which the plan feeds into " +
                tensor_label(plan_, input.tensor()));
  }
  const HostTensor& host = found->second;
  const plan::Tensor& tensor = plan_.tensors(input.tensor());
  const Shape rows(tensor.shape().begin() + 1, tensor.shape().end());
  if (host.dtype != tensor.dtype() || host.shape.empty() ||
      Shape(host.shape.begin() + 1, host.shape.end()) != rows ||
      host.shape[0] < input.sample_offset() + input.samples()) {
    throw Error("batch input '" + input.input() + "' is " + dtype_name(host.dtype) + " " +
                shape_string(host.shape) + " but the plan needs " + dtype_name(tensor.dtype()) +
                " with at least " + std::to_string(input.sample_offset() + input.samples()) +
                " rows of shape " + shape_string(rows));
  }
  const size_t row_bytes =
      tensor.bytes() / static_cast<size_t>(std::max<int64_t>(input.samples(), 1));
  if (host.data.size() < (input.sample_offset() + input.samples()) * row_bytes) {
    throw Error("batch input '" + input.input() + "' holds fewer bytes than its shape " +
                shape_string(host.shape) + " needs");
  }
  backend_->upload(arena_ + tensor.offset(), host.data.data() + input.sample_offset() * row_bytes,
                   tensor.bytes());
}

double Session::step(const Batch& batch) {
  for (int index : zeroed_) {
    backend_->upload(arena_ + plan_.tensors(index).offset(), zeros_.data(),
                     plan_.tensors(index).bytes());
  }
  for (const auto& input : plan_.inputs()) {
    upload_input(input, batch);
  }
  for (const auto& count : plan_.label_counts()) {
    const float value = count_labels(count, batch);
    backend_->upload(arena_ + plan_.tensors(count.tensor()).offset(), &value, sizeof value);
  }
  executor_->run_step(StepContext{steps_done_ + 1, options_.seed, updates_done_ + 1});
  ++steps_done_;
  if (plan_.has_gradient_norm()) {
    float norm = 0.0f;
    backend_->download(&norm, arena_ + plan_.tensors(plan_.gradient_norm().norm()).offset(),
                       sizeof norm);
    grad_norm_ = norm;
    // The update kernels skipped this step when the norm is not finite.
    if (std::isfinite(norm)) ++updates_done_;
  } else {
    ++updates_done_;
  }
  double loss = 0.0;
  for (const auto& term : plan_.loss()) {
    float value = 0.0f;
    backend_->download(&value, arena_ + plan_.tensors(term.tensor()).offset(), sizeof value);
    loss += term.weight() * static_cast<double>(value);
  }
  return loss;
}

std::string Session::first_non_finite_gradient() const {
  if (!plan_.has_gradient_norm()) return "";
  for (const plan::NormedGradient& gradient : plan_.gradient_norm().gradients()) {
    const std::vector<uint8_t> bytes = download(plan_.tensors(gradient.tensor()));
    const std::optional<NonFiniteValue> found = first_non_finite_float32(bytes);
    if (found) {
      return "'" + gradient.parameter() + "' (" + found->describe() + " at element " +
             std::to_string(found->index) + ")";
    }
  }
  return "";
}

const plan::Tensor& Session::tensor_named(const std::string& name) const {
  for (const auto& tensor : plan_.tensors()) {
    if (tensor.name() == name) return tensor;
  }
  throw Error("the plan has no tensor named '" + name + "'");
}

std::vector<uint8_t> Session::read_tensor(const std::string& name) const {
  return download(tensor_named(name));
}

std::vector<float> Session::read_floats(const std::string& name) const {
  const plan::Tensor& tensor = tensor_named(name);
  if (tensor.dtype() != plan::FLOAT32) {
    throw Error("tensor '" + name + "' is " + dtype_name(tensor.dtype()) + ", not float32");
  }
  std::vector<float> values(tensor.bytes() / sizeof(float));
  backend_->download(values.data(), arena_ + tensor.offset(), tensor.bytes());
  return values;
}

void Session::write_tensor(const std::string& name, const void* data, size_t bytes) {
  const plan::Tensor& tensor = tensor_named(name);
  if (bytes != tensor.bytes()) {
    throw Error("tensor '" + name + "' has " + std::to_string(tensor.bytes()) +
                " bytes; cannot write " + std::to_string(bytes));
  }
  backend_->upload(arena_ + tensor.offset(), data, bytes);
}

std::map<std::string, std::vector<uint8_t>> Session::trained_parameters() {
  std::map<std::string, std::vector<uint8_t>> values;
  for (int i = 0; i < plan_.parameters_size(); ++i) {
    const plan::ParameterLoad& load = plan_.parameters(i);
    const plan::Tensor& tensor = plan_.tensors(load.tensor());
    if (tensor.role() != plan::PARAMETER || values.count(load.initializer())) continue;
    // A shard is of the block, so shards are gathered first, then blocks.
    std::vector<uint8_t> value = load.has_shard() ? gather_shards(load, tensor) : download(tensor);
    if (load.has_block()) value = gather_blocks(load, layouts_.at(static_cast<size_t>(i)), value);
    values.emplace(load.initializer(), std::move(value));
  }
  if (plan_.collect_parameters()) {
    exchange_parameters(save_channel(plan_.collect_group(), "the plan collects parameters"),
                        *backend_, values);
  }
  return values;
}

std::vector<uint8_t> Session::read_tensor_at(int index) const {
  return download(plan_.tensors(index));
}

void Session::write_tensor_at(int index, const void* data, size_t bytes) {
  const plan::Tensor& tensor = plan_.tensors(index);
  if (bytes > tensor.bytes()) {
    throw Error(tensor_label(plan_, index) + " has " + std::to_string(tensor.bytes()) +
                " bytes; cannot write " + std::to_string(bytes));
  }
  std::vector<uint8_t> whole(tensor.bytes(), 0);
  if (bytes > 0) std::memcpy(whole.data(), data, bytes);
  backend_->upload(arena_ + tensor.offset(), whole.data(), whole.size());
}

std::vector<std::string> Session::gather_from_every_rank(const std::string& mine) {
  const int world = std::max(static_cast<int>(plan_.header().world_size()), 1);
  if (world == 1) return {mine};
  const auto everyone =
      std::find_if(plan_.groups().begin(), plan_.groups().end(),
                   [&](const plan::CommGroup& group) { return group.ranks_size() == world; });
  if (everyone == plan_.groups().end()) {
    throw Error("the plan has no group of all " + std::to_string(world) +
                " ranks, which checkpoints need to agree; re-plan with this build's piper-plan");
  }
  Communicator& link = save_channel(everyone->id(), "a checkpoint gathers from every rank");
  // all_gather_bytes moves equal sizes: the sizes first, then every string padded to the longest.
  const uint64_t size = mine.size();
  std::vector<uint8_t> size_bytes(sizeof size);
  std::memcpy(size_bytes.data(), &size, sizeof size);
  const std::vector<uint8_t> sizes = all_gather_bytes(link, *backend_, size_bytes);
  std::vector<uint64_t> lengths(static_cast<size_t>(world));
  for (size_t m = 0; m < lengths.size(); ++m) {
    std::memcpy(&lengths[m], sizes.data() + m * sizeof size, sizeof size);
  }
  const uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::vector<uint8_t> padded(longest, 0);
  std::memcpy(padded.data(), mine.data(), mine.size());
  const std::vector<uint8_t> gathered = all_gather_bytes(link, *backend_, padded);
  std::vector<std::string> by_rank(static_cast<size_t>(world));
  for (int m = 0; m < world; ++m) {
    const auto* begin = reinterpret_cast<const char*>(gathered.data() + m * longest);
    by_rank.at(static_cast<size_t>(everyone->ranks(m))) =
        std::string(begin, lengths[static_cast<size_t>(m)]);
  }
  return by_rank;
}

void Session::restore_progress(int64_t steps, int64_t updates) {
  steps_done_ = steps;
  updates_done_ = updates;
}

std::vector<uint8_t> Session::download(const plan::Tensor& tensor) const {
  std::vector<uint8_t> bytes(tensor.bytes());
  backend_->download(bytes.data(), arena_ + tensor.offset(), bytes.size());
  return bytes;
}

Communicator& Session::save_channel(int group, const std::string& what) {
  const auto found = groups_.find(group);
  if (found == groups_.end()) {
    throw Error(what + " over group " + std::to_string(group) +
                ", which this rank has not joined; re-plan");
  }
  return channel("group " + std::to_string(group), *found->second, "save");
}

std::vector<uint8_t> Session::gather_shards(const plan::ParameterLoad& load,
                                            const plan::Tensor& tensor) {
  const plan::ParameterShard& shard = load.shard();
  const std::string what = "parameter '" + load.initializer() + "' is sharded";
  Communicator& link = save_channel(shard.group(), what);
  std::vector<uint8_t> bytes = all_gather_bytes(link, *backend_, download(tensor));
  const uint64_t elements = static_cast<uint64_t>(shard.elements());
  if (elements * dtype_size(tensor.dtype()) > bytes.size()) {
    throw Error(what + " over group " + std::to_string(shard.group()) + ": its " +
                std::to_string(link.size()) + " members' " + tensor_label(plan_, load.tensor()) +
                " hold " + std::to_string(bytes.size()) + " bytes, fewer than its " +
                std::to_string(elements) + " elements; re-plan");
  }
  bytes.resize(elements * dtype_size(tensor.dtype()));
  return bytes;
}

std::vector<uint8_t> Session::gather_blocks(const plan::ParameterLoad& load,
                                            const BlockLayout& layout,
                                            const std::vector<uint8_t>& block) {
  Communicator& link = save_channel(load.block().group(),
                                    "parameter '" + load.initializer() + "' is split in blocks");
  return join_blocks(all_gather_bytes(link, *backend_, block), layout, link.size());
}

}  // namespace piper::engine
