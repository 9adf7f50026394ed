// A loaded plan ready to train: the arena with every tensor placed, parameters
// loaded from the ONNX model, plan constants written, every kernel prepared,
// and the streams ready to run one step at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/batch.h"
#include "engine/runtime/comm_ops.h"
#include "engine/runtime/dynamic_kernel.h"
#include "engine/runtime/executor.h"
#include "engine/runtime/parameter_block.h"
#include "formats/external_data.h"
#include "schemas/plan.pb.h"

namespace piper::engine {

struct SessionOptions {
  uint64_t seed = 0;  // handed to kernels through StepContext
  // Connects the plan's groups of more than one rank and its send/recv peers; needed (and
  // used only during construction) when the plan has any. Not owned.
  CommunicatorFactory* communicators = nullptr;
  // Scan every kernel's float outputs after it runs and stop at the first NaN or infinity
  // (engine/runtime/finite_check.h); for host backends.
  bool check_finite = false;
};

class Session {
 public:
  // Validates the plan (tensor indices, offsets within the arena, events, groups), allocates
  // the arena, writes constants, loads parameters from header.model_path, connects a
  // communicator for every plan group holding this rank (groups by id, then one per send/recv
  // peer, the same order on every rank) and prepares every kernel. Throws piper::Error naming
  // the tensor, initializer, group or instruction at fault.
  Session(plan::Plan plan, std::unique_ptr<Backend> backend, SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Runs one training step: feeds every plan input its rows of `batch` (the step's global
  // batch, see data.h), runs the streams and returns the loss, the sum of weight * value over
  // plan.loss(). Throws piper::Error naming a missing or mismatched input.
  double step(const Batch& batch);
  // Steps run so far.
  int64_t steps_done() const { return steps_done_; }
  // Steps whose update was applied: those whose global gradient norm was finite (a step with a
  // non-finite norm updates nothing, on every rank). The next update's 1-based optimizer step
  // number is updates_done() + 1.
  int64_t updates_done() const { return updates_done_; }
  // The global gradient norm of the last step (Plan.gradient_norm), or none when the plan
  // trains nothing or no step ran.
  std::optional<double> grad_norm() const { return grad_norm_; }
  // The first gradient of this rank's share of the norm holding a NaN or infinity, as
  // "'fc1.weight' (NaN at element 3)", or empty when this rank's are all finite.
  std::string first_non_finite_gradient() const;

  const plan::Plan& plan() const { return plan_; }
  Backend& backend() { return *backend_; }

  // The bytes of the (first) tensor named `name`; throws naming it when the plan has none.
  std::vector<uint8_t> read_tensor(const std::string& name) const;
  std::vector<float> read_floats(const std::string& name) const;
  // Overwrites the tensor named `name`; `bytes` must match its size.
  void write_tensor(const std::string& name, const void* data, size_t bytes);
  // Initializer name -> current bytes of its tensor, for every loaded parameter (role
  // PARAMETER): what --save-onnx writes back into the model. Sharded parameters are
  // all-gathered from their group, then blocks from theirs and laid back along their
  // dimension, and pipeline stages collect each other's parameters (Plan.collect_parameters),
  // so with any of them every rank must call it.
  std::map<std::string, std::vector<uint8_t>> trained_parameters();

  // For checkpoints (engine/runtime/checkpoint.h):
  // The model's shape of the initializer plan().parameters(load) loads.
  const Shape& initializer_shape(int load) const { return initializer_shapes_.at(load); }
  // The bytes of plan tensor `index`, and an overwrite of its first `bytes` bytes (the rest
  // become zero).
  std::vector<uint8_t> read_tensor_at(int index) const;
  void write_tensor_at(int index, const void* data, size_t bytes);
  // Every rank's `mine`, by rank, exchanged over a group of every rank (one rank: {mine}).
  // Collective: every rank must call it, between steps.
  std::vector<std::string> gather_from_every_rank(const std::string& mine);
  // Continues a run from a checkpoint: `steps` steps ran before, `updates` of them updated.
  void restore_progress(int64_t steps, int64_t updates);

  // Bytes this session holds on the device, its peak memory: the arena and the buffers its
  // collectives fuse buckets in.
  uint64_t peak_bytes() const { return arena_bytes_ + fusion_bytes(); }
  // Bytes of the buffers on the device that collectives fuse buckets in.
  uint64_t fusion_bytes() const;
  // The planner's estimate of memory by role.
  const plan::MemorySummary& planned_memory() const { return plan_.memory(); }
  size_t num_streams() const { return executor_->num_streams(); }
  size_t num_kernels() const { return executor_->num_kernels(); }
  // Host times of each instruction of the steps run while tracing is on (Executor), for
  // piper-run --trace; plan().streams(s).instructions(i) is last_trace().streams[s][i].
  void set_tracing(bool on) { executor_->set_tracing(on); }
  const StepTrace& last_trace() const { return executor_->last_trace(); }

 private:
  void check_tensors();
  // Checks every collective against its group's size, so that a plan that cannot run fails
  // the same way on every rank before any of them connects.
  void check_collectives() const;
  CommTensor comm_tensor(int index, const char* what) const;
  void write_constants();
  void load_parameters();
  // Loads the planned part of `initializer` (`what` names it) into the load's tensor; returns
  // the layout of the block it takes from (the whole initializer without a block).
  BlockLayout load_parameter(const plan::ParameterLoad& load, const onnx::TensorProto& initializer,
                             const formats::ExternalData& external, const std::string& what);
  void check_block_group(const plan::ParameterBlock& block, const Shape& dims,
                         const std::string& what) const;
  std::vector<uint8_t> download(const plan::Tensor& tensor) const;
  // The "save" channel of `group`; throws, prefixed by `what`, when this rank is not in it.
  Communicator& save_channel(int group, const std::string& what);
  // What the load's tensor holds a slice of (its block, or the whole initializer), rebuilt
  // from every member's slice in `tensor`.
  std::vector<uint8_t> gather_shards(const plan::ParameterLoad& load, const plan::Tensor& tensor);
  // The whole initializer rebuilt from every member's `block` laid out as `layout`.
  std::vector<uint8_t> gather_blocks(const plan::ParameterLoad& load, const BlockLayout& layout,
                                     const std::vector<uint8_t>& block);
  std::unique_ptr<Executor> prepare_streams();
  // The backend's kernel for these views, behind the finite check when it is on.
  std::unique_ptr<PreparedKernel> prepare_kernel(const plan::Kernel& kernel,
                                                 std::vector<TensorView> inputs,
                                                 std::vector<TensorView> outputs);
  std::vector<RunTimeExtent> run_time_extents(const plan::Kernel& kernel) const;
  void connect_communicators();
  std::unique_ptr<PreparedKernel> prepare_comm(const plan::Instruction& instruction,
                                               const std::string& stream);
  // The channel of `stream` on communicator `key` ("group 3", "peer 1").
  Communicator& channel(const std::string& key, Communicator& communicator,
                        const std::string& stream);
  // The buffer in `memory` that the collectives of `stream` fuse buckets in.
  FusionBuffer& fusion_buffer(const std::string& stream, Backend& memory);
  void abort_communicators();
  TensorView view(int index) const;
  const plan::Tensor& tensor_named(const std::string& name) const;
  void upload_input(const plan::BatchInput& input, const Batch& batch);

  plan::Plan plan_;
  std::unique_ptr<Backend> backend_;
  // Host memory for Gloo's transfers when backend_'s memory is a device's (prepare_comm).
  std::unique_ptr<Backend> host_memory_;
  SessionOptions options_;
  uint64_t arena_bytes_ = 0;
  uint8_t* arena_ = nullptr;
  std::map<int, std::unique_ptr<Communicator>> groups_;  // by group id
  std::map<int, std::unique_ptr<Communicator>> peers_;   // by global rank, for send/recv
  std::map<std::pair<std::string, std::string>, std::unique_ptr<Communicator>> channels_;
  // By stream and memory: a stream runs its collectives one at a time, so they share one.
  std::map<std::pair<std::string, Backend*>, std::unique_ptr<FusionBuffer>> fusion_;
  // By plan.parameters() index: the block each load takes from, for --save-onnx.
  std::vector<BlockLayout> layouts_;
  std::vector<Shape> initializer_shapes_;  // by plan.parameters() index
  std::vector<int> zeroed_;                // tensors with zero_at_step_start
  std::vector<uint8_t> zeros_;
  // Declared last: its kernels use the communicators, so it goes first.
  std::unique_ptr<Executor> executor_;
  int64_t steps_done_ = 0;
  int64_t updates_done_ = 0;
  std::optional<double> grad_norm_;
};

}  // namespace piper::engine
