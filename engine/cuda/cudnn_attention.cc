// cuDNN's fused flash attention for piper.FusedAttention and its gradient (cudnn_attention.h),
// built as cudnn-frontend graphs (tools/fetch-cudnn-frontend.sh fetches the headers) once per
// kernel and executed each step.
//
// cuDNN takes Q, K, V, Y, dY and the gradients as [b, h, s, d] with d contiguous: Q, V, Y and
// dY already are (b the batch indices, h 1); Kt [..., D, Tk] is copied into K [..., Tk, D]
// before each call and dK back into dKt after the backward's. A mask becomes an additive
// bfloat16 bias [1 or b, 1, T, Tk], rewritten each step since masks may be step inputs.
#include "engine/cuda/cudnn_attention.h"

#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>

#include "engine/cuda/check.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/ops.h"
#include "formats/error.h"

// The frontend reaches cuDNN through this library handle (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace piper::engine::cuda {
namespace {

namespace fe = cudnn_frontend;
using Graph = fe::graph::Graph;
using TensorAttributes = fe::graph::Tensor_attributes;
using TensorPtr = std::shared_ptr<TensorAttributes>;

enum Uid : int64_t { kQ = 1, kK, kV, kBias, kY, kStats, kDy, kDq, kDk, kDv };

bool cudnn_loaded() {
  static const bool loaded = [] {
    for (const char* name : {"libcudnn.so.9", "libcudnn.so"}) {
      fe::cudnn_dlhandle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (fe::cudnn_dlhandle != nullptr) return true;
    }
    return false;
  }();
  return loaded;
}

// One cuDNN handle per GPU, kept for the process's life: destroying one after the CUDA runtime
// has shut down at exit fails. Kernels on several streams take turns setting its stream.
struct SharedHandle {
  std::mutex mutex;
  cudnnHandle_t handle = nullptr;
};

// Null when cuDNN cannot make a handle on `device` (the calling thread's current GPU).
SharedHandle* shared_handle(int device) {
  static std::mutex mutex;
  static std::unordered_map<int, SharedHandle*> handles;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = handles.find(device);
  if (found != handles.end()) return found->second;
  auto* shared = new SharedHandle;
  if (fe::detail::create_handle(&shared->handle) != CUDNN_STATUS_SUCCESS) {
    delete shared;
    shared = nullptr;
  }
  return handles[device] = shared;
}

// A built graph with the device addresses of its tensors (fixed by the memory plan) and its
// workspace.
struct CudnnCall {
  std::shared_ptr<Graph> graph;
  std::unordered_map<int64_t, void*> pack;
  std::shared_ptr<char> workspace;
  SharedHandle* handle = nullptr;
  std::string op;

  void run(cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(handle->mutex);
    if (fe::detail::set_stream(handle->handle, stream) != CUDNN_STATUS_SUCCESS) {
      throw Error(op + ": cuDNN could not take the kernel's CUDA stream");
    }
    fe::error_t status = graph->execute(handle->handle, pack, workspace.get());
    if (status.is_bad())
      throw Error(op + ": cuDNN's fused attention failed: " + status.get_message());
  }
};

// Whether cuDNN may run this attention at all (before building a graph).
bool eligible(const Attention& a) {
  const char* setting = std::getenv("PIPER_CUDNN_ATTENTION");
  if (setting != nullptr && std::string(setting) == "0") return false;
  if (a.type != CUDA_R_16BF || a.batch * a.t * a.tk * a.d * a.dv == 0) return false;
  // A bias adds; a bool mask sets. Only −inf makes the two alike.
  const bool fill_is_bias = std::isinf(a.fill) && a.fill < 0;
  return a.mask != cpu::AttentionGeometry::MaskKind::kFill || fill_is_bias;
}

// Batch indices of the bias: 1 when the mask is the same for every batch index.
int64_t bias_batches(const Attention& a) {
  if (a.mask == cpu::AttentionGeometry::MaskKind::kNone) return 0;
  for (int64_t offset : a.mask_offsets) {
    if (offset != a.mask_offsets.front()) return a.batch;
  }
  return 1;
}

std::shared_ptr<Graph> new_graph() {
  auto graph = std::make_shared<Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

// [b, 1, rows, cols] with rows of `cols` contiguous elements, as cuDNN describes it.
TensorAttributes& describe(TensorAttributes& tensor, Uid uid, int64_t b, int64_t rows,
                           int64_t cols) {
  return tensor.set_uid(uid)
      .set_dim({b, 1, rows, cols})
      .set_stride({rows * cols, rows * cols, cols, 1});
}

TensorPtr input(Graph& graph, Uid uid, const char* name, int64_t b, int64_t rows, int64_t cols) {
  TensorAttributes tensor;
  tensor.set_name(name);
  return graph.tensor(describe(tensor, uid, b, rows, cols));
}

void output(const TensorPtr& tensor, Uid uid, int64_t b, int64_t rows, int64_t cols) {
  describe(tensor->set_output(true), uid, b, rows, cols);
}

TensorPtr row_statistic(Graph& graph, const Attention& a) {
  TensorAttributes stats;
  stats.set_name("Stats").set_data_type(fe::DataType_t::FLOAT);
  return graph.tensor(describe(stats, kStats, a.batch, a.t, 1));
}

// The shared inputs; `bias` the bias tensor when the attention is masked.
struct Operands {
  TensorPtr q, k, v, bias;
};

Operands operands(Graph& graph, const Attention& a) {
  Operands o;
  o.q = input(graph, kQ, "Q", a.batch, a.t, a.d);
  o.k = input(graph, kK, "K", a.batch, a.tk, a.d);
  o.v = input(graph, kV, "V", a.batch, a.tk, a.dv);
  if (const int64_t b = bias_batches(a); b > 0) o.bias = input(graph, kBias, "Bias", b, a.t, a.tk);
  return o;
}

// What a graph depends on: the attention's shapes, scale and bias, and the direction.
std::string graph_key(const Attention& a, const std::string& direction) {
  std::ostringstream key;
  key << direction << ' ' << a.batch << ' ' << a.t << ' ' << a.tk << ' ' << a.d << ' ' << a.dv
      << ' ' << std::hexfloat << a.scale << ' ' << bias_batches(a);
  return key.str();
}

// Gives `call` the built graph `key` names on the GPU `context` runs on, described by `describe`
// and built when first needed: a model's layers share one (building one can take cuDNN a second,
// compiling its kernels). Returns why not where cuDNN cannot build it. Built graphs, like the
// handles, live as long as the process.
std::string build(CudnnCall& call, CudaContext& context, const KernelArgs& args,
                  const std::string& key, const std::function<std::shared_ptr<Graph>()>& describe) {
  call.op = args.op();
  call.handle = shared_handle(context.device());
  if (call.handle == nullptr) return "cuDNN could not create a handle";
  static std::mutex mutex;
  static auto* built = new std::unordered_map<std::string, std::shared_ptr<Graph>>;
  std::lock_guard<std::mutex> lock(mutex);
  const std::string device_key = std::to_string(context.device()) + ' ' + key;
  auto found = built->find(device_key);
  if (found == built->end()) {
    std::shared_ptr<Graph> graph = describe();
    fe::error_t status = graph->build(call.handle->handle, {fe::HeurMode_t::A});
    if (status.is_bad()) return "no cuDNN engine: " + status.get_message();
    found = built->emplace(device_key, std::move(graph)).first;
  }
  call.graph = found->second;
  int64_t workspace = 0;
  fe::error_t status = call.graph->get_workspace_size(workspace);
  if (status.is_bad()) return status.get_message();
  call.workspace = device_array<char>(static_cast<size_t>(workspace));
  return "";
}

// The forward: Y and, when training, each row's log Σ exp(S).
std::shared_ptr<Graph> forward_graph(const Attention& a, bool training) {
  auto graph = new_graph();
  const Operands o = operands(*graph, a);
  auto options = fe::graph::SDPA_attributes().set_name("attention").set_attn_scale(a.scale);
  options.set_generate_stats(training);
  if (o.bias) options.set_bias(o.bias);
  auto [out, stats] = graph->sdpa(o.q, o.k, o.v, options);
  output(out, kY, a.batch, a.t, a.dv);
  if (training) {
    output(stats, kStats, a.batch, a.t, 1);
    stats->set_data_type(fe::DataType_t::FLOAT);
  }
  return graph;
}

// The backward: dQ, dK and dV from dY, Y and the rows' log Σ exp(S).
std::shared_ptr<Graph> backward_graph(const Attention& a) {
  auto graph = new_graph();
  const Operands o = operands(*graph, a);
  const TensorPtr y = input(*graph, kY, "Y", a.batch, a.t, a.dv);
  const TensorPtr dy = input(*graph, kDy, "dY", a.batch, a.t, a.dv);
  auto options =
      fe::graph::SDPA_backward_attributes().set_name("attention_grad").set_attn_scale(a.scale);
  if (o.bias) options.set_bias(o.bias);
  auto [dq, dk, dv] = graph->sdpa_backward(o.q, o.k, o.v, y, dy, row_statistic(*graph, a), options);
  output(dq, kDq, a.batch, a.t, a.d);
  output(dk, kDk, a.batch, a.tk, a.d);
  output(dv, kDv, a.batch, a.tk, a.dv);
  return graph;
}

// Says once per process why an attention cuDNN might have run did not go there (the cuBLASLt
// kernels are slower and hold scores), and returns no kernel.
std::unique_ptr<PreparedKernel> decline(const KernelArgs& args, const std::string& why) {
  static std::once_flag said;
  std::call_once(said, [&] {
    std::cerr << "piper: note: " << args.op() << " runs on cuBLASLt, not cuDNN's fused attention ("
              << why << ")\n";
  });
  return nullptr;
}

// The copies between Kt [batch, D, Tk] and K [batch, Tk, D]; the bias the mask becomes.
struct Layout {
  StridedIndex kt_to_k, k_to_kt;
  std::shared_ptr<uint16_t> k, bias;
  AttentionRows bias_rows;
};

Layout layout(const Attention& a) {
  Layout l;
  l.kt_to_k = strided_index({a.batch, a.tk, a.d}, {{a.tk * a.d, a.d, 1}, {a.d * a.tk, 1, a.tk}});
  l.k_to_kt = strided_index({a.batch, a.d, a.tk}, {{a.d * a.tk, a.tk, 1}, {a.tk * a.d, 1, a.d}});
  l.k = device_array<uint16_t>(static_cast<size_t>(a.batch * a.tk * a.d));
  l.bias_rows = AttentionRows{0, bias_batches(a), a.t, a.tk};
  l.bias = device_array<uint16_t>(static_cast<size_t>(l.bias_rows.batches * a.t * a.tk));
  return l;
}

// Lays out K and the bias for this step's call.
void stage(const Layout& l, const Attention& a, const void* kt, cudaStream_t stream) {
  launch_strided_copy(l.kt_to_k, a.element_bytes, kt, l.k.get(), stream);
  if (l.bias)
    launch_attention_bias(l.bias_rows, a.device_mask, FloatView{l.bias.get(), true}, stream);
}

bool aligned(std::initializer_list<const void*> addresses) {
  for (const void* p : addresses) {
    if (p != nullptr && address(p) % 16 != 0) return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<PreparedKernel> cudnn_attention(const KernelArgs& args, CudaContext& context,
                                                const Attention& a) {
  const bool training = args.has_output(1) && args.has_output(2);
  if (!eligible(a) || args.has_output(1) != args.has_output(2)) return nullptr;
  if (!cudnn_loaded()) return decline(args, "cannot load libcudnn.so.9");
  void* y = args.output(0).data;
  if (!aligned({args.input(0).data, args.input(2).data, y})) {
    return decline(args, "an operand is not 16-byte aligned");
  }
  auto call = std::make_shared<CudnnCall>();
  const std::string why =
      build(*call, context, args, graph_key(a, training ? "forward training" : "forward"),
            [&] { return forward_graph(a, training); });
  if (!why.empty()) return decline(args, why);
  auto l = std::make_shared<Layout>(layout(a));
  call->pack = {{kQ, args.input(0).data}, {kK, l->k.get()}, {kV, args.input(2).data}, {kY, y}};
  if (l->bias) call->pack[kBias] = l->bias.get();
  float* row_max = training ? args.output(1).as<float>() : nullptr;
  float* row_inv_sum = training ? args.output(2).as<float>() : nullptr;
  if (training) call->pack[kStats] = row_max;  // log Σ exp(S), with RowInvSum 1
  return make_kernel([&context, a, call, l, kt = args.input(1).data, row_inv_sum,
                      rows = a.batch * a.t](const StepContext&) {
    const cudaStream_t stream = context.stream();
    stage(*l, a, kt, stream);
    call->run(stream);
    if (row_inv_sum != nullptr) launch_fill(rows, 1.0f, row_inv_sum, stream);
  });
}

std::unique_ptr<PreparedKernel> cudnn_attention_grad(const KernelArgs& args, CudaContext& context,
                                                     const Attention& a) {
  if (!eligible(a) || !args.has_input(7)) return nullptr;
  if (!cudnn_loaded()) return decline(args, "cannot load libcudnn.so.9");
  const KernelArgs labelled = float32_labelled(args);
  void* dq = labelled.gradient_output(0, 1);
  void* dkt = labelled.gradient_output(1, 2);
  void* dv = labelled.gradient_output(2, 3);
  if (!aligned({args.input(0).data, args.input(1).data, args.input(3).data, args.input(7).data, dq,
                dv})) {
    return decline(args, "an operand is not 16-byte aligned");
  }
  auto call = std::make_shared<CudnnCall>();
  const std::string why =
      build(*call, context, args, graph_key(a, "backward"), [&] { return backward_graph(a); });
  if (!why.empty()) return decline(args, why);
  auto l = std::make_shared<Layout>(layout(a));
  // cuDNN writes every gradient: the omitted ones, and dK before it becomes dKt, go to scratch.
  const auto dk = device_array<uint16_t>(static_cast<size_t>(a.batch * a.tk * a.d));
  const auto dq_scratch = device_array<uint16_t>(dq == nullptr ? a.batch * a.t * a.d : 0);
  const auto dv_scratch = device_array<uint16_t>(dv == nullptr ? a.batch * a.tk * a.dv : 0);
  const auto lse = device_array<float>(static_cast<size_t>(a.batch * a.t));
  call->pack = {{kQ, args.input(1).data},
                {kK, l->k.get()},
                {kV, args.input(3).data},
                {kY, args.input(7).data},
                {kDy, args.input(0).data},
                {kStats, lse.get()},
                {kDq, dq != nullptr ? dq : dq_scratch.get()},
                {kDk, dk.get()},
                {kDv, dv != nullptr ? dv : dv_scratch.get()}};
  if (l->bias) call->pack[kBias] = l->bias.get();
  return make_kernel([&context, a, call, l, dk, dq_scratch, dv_scratch, lse, dkt,
                      kt = args.input(2).data, row_max = args.input(5).as<const float>(),
                      row_inv_sum = args.input(6).as<const float>()](const StepContext&) {
    const cudaStream_t stream = context.stream();
    stage(*l, a, kt, stream);
    launch_row_log_sum_exp(a.batch * a.t, row_max, row_inv_sum, lse.get(), stream);
    call->run(stream);
    if (dkt != nullptr) launch_strided_copy(l->k_to_kt, a.element_bytes, dk.get(), dkt, stream);
  });
}

}  // namespace piper::engine::cuda
