// The op graph: the operators of one training step (forward ONNX ops, their
// gradient ops, optimizer ops) over tensors of fixed shape. It is the template
// that tasks instantiate per microbatch; it knows nothing of devices.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/ir/types.h"

namespace piper::ir {

// A bounded dynamic dimension (docs/plan-format.md): `shape[dim]` is its bound, what memory is
// planned for; in a step its extent is `scale` times the value of the int64 scalar `extent`
// (a NonZero's count), and the tensor's elements are packed as if its shape had that extent.
struct DynamicDim {
  int dim = 0;
  TensorId extent = -1;
  int64_t scale = 1;

  bool operator==(const DynamicDim&) const = default;
};

// How the members of a tensor-parallel group hold a tensor (ir/placement.h): whole on every
// member, one block along `dim` on each (consecutive blocks in group order), or a partial sum
// the members' values add up to.
struct Placement {
  enum class Kind { kReplicated, kSharded, kPartial };
  Kind kind = Kind::kReplicated;
  int dim = -1;  // kSharded only

  static Placement replicated() { return {}; }
  static Placement sharded(int dim) { return {Kind::kSharded, dim}; }
  static Placement partial() { return {Kind::kPartial, -1}; }
  bool is_replicated() const { return kind == Kind::kReplicated; }
  bool is_sharded() const { return kind == Kind::kSharded; }
  bool is_partial() const { return kind == Kind::kPartial; }
  bool operator==(const Placement&) const = default;
};

// "R", "S(1)", "P"; parse_placement is its inverse (throws std::invalid_argument).
std::string to_string(const Placement& placement);
Placement parse_placement(const std::string& text);

// Entries i = start + k * step, k < count, along one dimension of a sample.
struct CountWindow {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;

  bool operator==(const CountWindow&) const = default;
};

// For a float32 scalar input that the engine computes each step instead of feeding it rows: the
// number of entries of the int64 batch input `labels`, over the step's whole global batch, that
// are not `ignore_index` (the divisor of a token mean; planner/token_mean.h). With a `window`
// (one per sample dimension), only the entries of each sample it selects count: the labels of a
// loss that reads them sliced, as causal language models shift them.
struct LabelCount {
  TensorId labels = -1;  // -1: not a label count
  int64_t ignore_index = 0;
  std::vector<CountWindow> window{};

  bool operator==(const LabelCount&) const = default;
};

struct Tensor {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  // kGradient is for parameter gradients only; gradients flowing through the
  // graph are activations of the backward pass.
  Role role = Role::kActivation;
  // For parameters and frozen initializers: the ONNX initializer to load.
  std::string initializer;
  // For planner constants: the little-endian bytes of the value.
  std::vector<uint8_t> data;
  // For integer batch inputs: values lie in [0, int_high) (0 = unknown).
  int64_t int_high = 0;
  // Zeroed at the start of every step; piper.Accumulate ops add into it.
  bool accumulated = false;
  // For a parameter shard (ZeRO-3) or a gradient shard (ZeRO-2): the whole tensor, flattened
  // and zero-padded, of which each replica holds one slice of this tensor's size, in the order
  // of the replicas of the tasks that use it.
  TensorId shard_of = -1;
  // Dimensions whose extent is known only at run time, by increasing `dim`
  // (ir/dynamic_dims.h derives them).
  std::vector<DynamicDim> dynamic{};
  // Over the tensor-parallel group of the devices computing it; `shape` is one member's block.
  Placement placement{};
  // Under expert parallelism (OpGraph::replica_group), for a tensor replicated above: how the
  // data-parallel replicas hold what each computes of it — their rows of the batch along a
  // dimension, a partial sum over their rows, or replicated (not data, or Piper cannot tell).
  Placement replica_placement{};
  // `placement` is over the data-parallel replicas of the tasks computing it (a tensor that
  // expert parallelism splits), not over their devices' tensor-parallel group: with both,
  // each tensor is split along one of the two and whole along the other.
  bool placed_over_replicas = false;
  // For a parameter each data-parallel replica binds to an initializer of its own (an expert
  // slot of expert parallelism over one module per expert, directives/expert_modules.h): the
  // initializer replica r loads, one per replica of the tasks using it.
  std::vector<std::string> replica_initializers{};

  LabelCount label_count{};
};

struct Op {
  std::string type;              // ONNX op type, or "piper.<Name>" for Piper's own ops
  std::string name;              // ONNX node name, or derived from it for gradient ops
  std::vector<TensorId> inputs;  // -1 marks an omitted optional input
  std::vector<TensorId> outputs;
  Attributes attributes;
  Pass pass = Pass::kForward;
  Tags tags;
};

// A trained parameter with its gradient and optimizer state tensors.
struct TrainedParameter {
  TensorId parameter = -1;
  TensorId gradient = -1;
  std::vector<TensorId> state;
};

class OpGraph {
 public:
  TensorId add_tensor(Tensor tensor);
  OpId add_op(Op op);
  // Inserts `op` before the op at `position` (ops from there on move one on).
  OpId insert_op(OpId position, Op op);

  const Tensor& tensor(TensorId id) const { return tensors_.at(id); }
  Tensor& tensor(TensorId id) { return tensors_.at(id); }
  const Op& op(OpId id) const { return ops_.at(id); }
  Op& op(OpId id) { return ops_.at(id); }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<Op>& ops() const { return ops_; }
  int num_tensors() const { return static_cast<int>(tensors_.size()); }
  int num_ops() const { return static_cast<int>(ops_.size()); }

  std::optional<TensorId> find_tensor(const std::string& name) const;
  // The op writing `tensor`, or -1 for inputs, parameters and constants.
  OpId producer(TensorId tensor) const;
  std::vector<OpId> consumers(TensorId tensor) const;
  // Takes the graph-level roles below (inputs, loss, loss seed, trained parameters, gradient
  // norm, replica group) from `source`, for a pass that rebuilds the ops and tensors but keeps
  // the tensor ids those roles name.
  void keep_roles_of(const OpGraph& source);

  // Graph inputs fed per step, in ONNX order.
  std::vector<TensorId> inputs;
  // Scalar loss; its gradient seeds autodiff.
  TensorId loss = -1;
  // The constant d(step loss)/d(loss): 1, or 1/M with M microbatches.
  TensorId loss_seed = -1;
  std::vector<TrainedParameter> trained;
  // The global L2 norm of the gradients the update ops apply (planner/gradient_norm.h), a
  // float32 scalar that every update op reads; -1 until that pass runs.
  TensorId grad_norm = -1;
  // Expert parallelism (directives/shard.cc): > 0 when placements are over the data-parallel
  // replicas of every task, a group of this many, rather than over a tensor-parallel group.
  int64_t replica_group = 0;

 private:
  std::vector<Tensor> tensors_;
  std::vector<Op> ops_;
};

// Whether `op` is a reshard or block slice of expert parallelism (directives/shard.cc, attribute
// "over" = "replicas"): over the data-parallel replicas of its task, whole on each member of a
// tensor-parallel group.
bool reshards_over_replicas(const Op& op);
// Whether `op` runs over the replicas of its task rather than its devices' tensor-parallel
// group: an expert-parallel reshard, or a batch mean's average (attribute "group" = "replicas").
bool runs_over_replicas(const Op& op);

// True for tensors that hold one value per microbatch (activations, inputs,
// gradients flowing backward) rather than one per step (parameters, state).
bool is_per_microbatch(const OpGraph& graph, TensorId tensor);

}  // namespace piper::ir
