#include "engine/runtime/comm_ops.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "engine/runtime/row_exchange.h"
#include "formats/error.h"

namespace piper::engine {
namespace {

const char* kind_name(plan::Collective::Kind kind) {
  switch (kind) {
    case plan::Collective::ALL_REDUCE:
      return "all_reduce";
    case plan::Collective::REDUCE_SCATTER:
      return "reduce_scatter";
    case plan::Collective::ALL_GATHER:
      return "all_gather";
    case plan::Collective::BROADCAST:
      return "broadcast";
    case plan::Collective::ALL_TO_ALL:
      return "all_to_all";
    case plan::Collective::ALL_TO_ALL_V:
      return "all_to_all_v";
    case plan::Collective::ALL_TO_ALL_V_RETURN:
      return "all_to_all_v_return";
    default:
      return "unknown";
  }
}

size_t elements(const CommTensor& tensor) { return static_cast<size_t>(tensor.view.elements()); }

// What a reduction or gather of `dtype` runs on; none for the dtypes communicators cannot sum.
std::optional<ElementType> element_type(plan::DType dtype) {
  if (dtype == plan::FLOAT32) return ElementType::kFloat32;
  if (dtype == plan::BFLOAT16) return ElementType::kBFloat16;
  return std::nullopt;
}

// Reductions and gathers work on elements of one type; the others move bytes.
bool takes_element_type(plan::Collective::Kind kind) {
  return kind == plan::Collective::ALL_REDUCE || kind == plan::Collective::REDUCE_SCATTER ||
         kind == plan::Collective::ALL_GATHER;
}

// One input/output pair of a collective, resolved at load time.
struct Pair {
  CommTensor in, out;
  size_t in_count = 0, out_count = 0;  // elements
  size_t k = 0;       // elements per member: all_reduce's whole count, else the shard size
  size_t offset = 0;  // where this pair's k elements start within a fused shard
};

// Runs a collective's pairs. Several pairs of a reduction (a bucket) travel as one fused
// operation: each member's shard of the fused buffer is the concatenation of every pair's
// shard, so that a bucket costs one ring, not one per tensor. The pairs of a reduction share
// one dtype, `type`.
class CollectiveKernel : public PreparedKernel {
 public:
  CollectiveKernel(plan::Collective::Kind kind, bool average, int root, std::vector<Pair> pairs,
                   ElementType type, Communicator& communicator, Backend& memory,
                   FusionBuffer& fusion)
      : kind_(kind),
        average_(average),
        root_(root),
        pairs_(std::move(pairs)),
        type_(type),
        e_(element_size(type)),
        communicator_(communicator),
        memory_(memory),
        fusion_(fusion),
        n_(static_cast<size_t>(communicator.size())) {
    for (Pair& pair : pairs_) {
      pair.offset = fused_k_;
      fused_k_ += pair.k;
    }
    const bool fusable = kind_ == plan::Collective::ALL_REDUCE ||
                         kind_ == plan::Collective::REDUCE_SCATTER ||
                         kind_ == plan::Collective::ALL_GATHER;
    const bool direct =
        pairs_.size() == 1 &&
        (kind_ == plan::Collective::ALL_REDUCE ||
         (kind_ == plan::Collective::REDUCE_SCATTER && pairs_[0].in_count == n_ * pairs_[0].k) ||
         (kind_ == plan::Collective::ALL_GATHER && pairs_[0].out_count == n_ * pairs_[0].k));
    fused_ = fusable && !pairs_.empty() && !direct;
    if (fused_) {
      // The reduce-scatter pads each pair's input to n shards: with zeros, which the buffer
      // keeps apart, since the users before this one leave their values where the pads go.
      size_t padding = 0;
      if (kind_ == plan::Collective::REDUCE_SCATTER) {
        for (const Pair& pair : pairs_) padding = std::max(padding, n_ * pair.k - pair.in_count);
      }
      const size_t whole = kind_ == plan::Collective::ALL_REDUCE ? fused_k_ : n_ * fused_k_;
      fusion_.reserve(whole * e_, padding * e_);
    }
  }

  void run(const StepContext&) override {
    if (fused_) {
      run_fused();
      return;
    }
    for (Pair& pair : pairs_) {
      void* in = pair.in.view.data;
      void* out = pair.out.view.data;
      switch (kind_) {
        case plan::Collective::ALL_REDUCE:
          if (in != out) memory_.copy(out, in, pair.in.view.bytes());
          communicator_.all_reduce(out, pair.out_count, type_, average_);
          break;
        case plan::Collective::REDUCE_SCATTER:
          communicator_.reduce_scatter(in, out, pair.k, type_, average_);
          break;
        case plan::Collective::ALL_GATHER:
          communicator_.all_gather(in, out, pair.k, type_);
          break;
        case plan::Collective::BROADCAST:
          if (in != out && communicator_.rank() == root_) {
            memory_.copy(out, in, pair.in.view.bytes());
          }
          communicator_.broadcast(out, pair.out.view.bytes(), root_);
          break;
        case plan::Collective::ALL_TO_ALL:
          communicator_.all_to_all(in, out, pair.in.view.bytes() / n_);
          break;
        default:
          break;
      }
    }
  }

 private:
  // The fused buffer is every member's fused shard in group order (all_reduce: the bucket);
  // reduce_scatter and all_gather work in place, on this member's shard within it.
  void run_fused() {
    uint8_t* full = fusion_.data();
    uint8_t* shard = full + static_cast<size_t>(communicator_.rank()) * fused_k_ * e_;
    switch (kind_) {
      case plan::Collective::ALL_REDUCE:
        for (const Pair& pair : pairs_) {
          memory_.copy(full + pair.offset * e_, pair.in.view.data, pair.k * e_);
        }
        communicator_.all_reduce(full, fused_k_, type_, average_);
        for (const Pair& pair : pairs_) {
          memory_.copy(pair.out.view.data, full + pair.offset * e_, pair.k * e_);
        }
        break;
      case plan::Collective::REDUCE_SCATTER:
        // Shard r of the fused input: every pair's shard r, zero past the end of its input.
        for (const Pair& pair : pairs_) {
          const auto* in = pair.in.view.as<const uint8_t>();
          for (size_t r = 0; r < n_; ++r) {
            const size_t first = r * pair.k;
            const size_t have = first < pair.in_count ? std::min(pair.k, pair.in_count - first) : 0;
            uint8_t* to = full + (r * fused_k_ + pair.offset) * e_;
            memory_.copy(to, in + first * e_, have * e_);
            if (have < pair.k) memory_.copy(to + have * e_, fusion_.zeros(), (pair.k - have) * e_);
          }
        }
        communicator_.reduce_scatter(full, shard, fused_k_, type_, average_);
        for (const Pair& pair : pairs_) {
          memory_.copy(pair.out.view.data, shard + pair.offset * e_, pair.k * e_);
        }
        break;
      case plan::Collective::ALL_GATHER:
        for (const Pair& pair : pairs_) {
          memory_.copy(shard + pair.offset * e_, pair.in.view.data, pair.k * e_);
        }
        communicator_.all_gather(shard, full, fused_k_, type_);
        // Output element i of a pair is element i % k of member i / k's shard; the output
        // keeps the first out_count elements.
        for (const Pair& pair : pairs_) {
          auto* out = pair.out.view.as<uint8_t>();
          for (size_t r = 0; r < n_ && r * pair.k < pair.out_count; ++r) {
            const size_t take = std::min(pair.k, pair.out_count - r * pair.k);
            memory_.copy(out + r * pair.k * e_, full + (r * fused_k_ + pair.offset) * e_,
                         take * e_);
          }
        }
        break;
      default:
        break;
    }
  }

  plan::Collective::Kind kind_;
  bool average_;
  int root_;
  std::vector<Pair> pairs_;
  ElementType type_;
  size_t e_;  // bytes per element of type_
  Communicator& communicator_;
  Backend& memory_;  // where the tensors and fusion_ live: copies
  FusionBuffer& fusion_;
  size_t n_;
  bool fused_ = false;
  size_t fused_k_ = 0;  // sum of the pairs' k
};

class TransferKernel : public PreparedKernel {
 public:
  TransferKernel(CommTensor tensor, int peer, int tag, bool is_send, Communicator& communicator)
      : tensor_(std::move(tensor)),
        peer_(peer),
        tag_(tag),
        is_send_(is_send),
        communicator_(communicator) {}

  void run(const StepContext&) override {
    if (is_send_) {
      communicator_.send(tensor_.view.data, tensor_.view.bytes(), peer_, tag_);
    } else {
      communicator_.recv(tensor_.view.data, tensor_.view.bytes(), peer_, tag_);
    }
  }

 private:
  CommTensor tensor_;
  int peer_;
  int tag_;
  bool is_send_;
  Communicator& communicator_;
};

}  // namespace

namespace {

// The collective's (input, output) pairs, checked for a group of `n` members.
std::vector<Pair> checked_pairs(const plan::Collective& collective, std::vector<CommTensor> inputs,
                                std::vector<CommTensor> outputs, size_t n) {
  const plan::Collective::Kind kind = collective.kind();
  const std::string name = kind_name(kind);
  if (name == "unknown") {
    throw Error("collective of unknown kind " + std::to_string(static_cast<int>(kind)));
  }
  const std::string group = "a group of " + std::to_string(n);
  if (inputs.size() != outputs.size()) {
    throw Error(name + " has " + std::to_string(inputs.size()) + " inputs but " +
                std::to_string(outputs.size()) + " outputs");
  }
  if (kind == plan::Collective::BROADCAST &&
      (collective.root() < 0 || static_cast<size_t>(collective.root()) >= n)) {
    throw Error("broadcast from root " + std::to_string(collective.root()) + " in " + group +
                " (the root is a member index, 0 to " + std::to_string(n - 1) + ")");
  }
  std::vector<Pair> pairs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Pair pair{std::move(inputs[i]), std::move(outputs[i])};
    const std::string what = name + " " + pair.in.label + " -> " + pair.out.label;
    if (!pair.in.view.present() || !pair.out.view.present()) {
      throw Error(what + ": every input and output must be given");
    }
    if (takes_element_type(kind) &&
        (!element_type(pair.in.view.dtype) || !element_type(pair.out.view.dtype))) {
      throw Error(what + ": " + name + " needs float32 or bfloat16 tensors, got " +
                  dtype_name(pair.in.view.dtype) + " -> " + dtype_name(pair.out.view.dtype));
    }
    if (pair.in.view.dtype != pair.out.view.dtype) {
      throw Error(what + ": the input is " + dtype_name(pair.in.view.dtype) + ", the output " +
                  dtype_name(pair.out.view.dtype));
    }
    if (takes_element_type(kind) && !pairs.empty() &&
        pair.in.view.dtype != pairs[0].in.view.dtype) {
      throw Error(what + ": the tensors of one " + name + " share a dtype, but this pair is " +
                  dtype_name(pair.in.view.dtype) + " and the first " +
                  dtype_name(pairs[0].in.view.dtype));
    }
    const size_t in = elements(pair.in), out = elements(pair.out);
    pair.in_count = in;
    pair.out_count = out;
    pair.k = kind == plan::Collective::REDUCE_SCATTER ? out
             : kind == plan::Collective::ALL_GATHER   ? in
                                                      : out;
    switch (kind) {
      case plan::Collective::ALL_REDUCE:
      case plan::Collective::BROADCAST:
        if (in != out) {
          throw Error(what + ": input has " + std::to_string(in) + " elements, output " +
                      std::to_string(out) + "; they must match");
        }
        break;
      case plan::Collective::REDUCE_SCATTER:
        if (in > n * out) {
          throw Error(what + ": input has " + std::to_string(in) + " elements, more than " + group +
                      " times the output's " + std::to_string(out));
        }
        break;
      case plan::Collective::ALL_GATHER:
        if (out > n * in) {
          throw Error(what + ": output has " + std::to_string(out) + " elements, more than " +
                      group + " times the input's " + std::to_string(in));
        }
        break;
      case plan::Collective::ALL_TO_ALL:
        if (in != out || in % n != 0) {
          throw Error(what + ": input and output need the same number of elements, divisible " +
                      "by the group size " + std::to_string(n) + "; got " + std::to_string(in) +
                      " and " + std::to_string(out));
        }
        break;
      default:
        break;
    }
    pairs.push_back(std::move(pair));
  }
  return pairs;
}

}  // namespace

FusionBuffer::~FusionBuffer() { memory_.release(base_); }

void FusionBuffer::reserve(size_t bytes, size_t zero_bytes) {
  if (base_ != nullptr) throw std::logic_error("FusionBuffer::reserve after allocate");
  bytes_ = std::max(bytes_, bytes);
  zero_bytes_ = std::max(zero_bytes_, zero_bytes);
}

void FusionBuffer::allocate() {
  if (base_ != nullptr || bytes_ == 0) return;
  // Zero-filled by the backend; the zeros stay so, since users work only past them.
  base_ = static_cast<uint8_t*>(memory_.allocate(zero_room() + bytes_));
}

uint8_t* FusionBuffer::data() const {
  check_allocated();
  return base_ + zero_room();
}

const uint8_t* FusionBuffer::zeros() const {
  check_allocated();
  return base_;
}

// The zeros, rounded up so that the room users work in keeps the allocation's alignment.
size_t FusionBuffer::zero_room() const {
  constexpr size_t kAlignment = 64;
  return (zero_bytes_ + kAlignment - 1) / kAlignment * kAlignment;
}

void FusionBuffer::check_allocated() const {
  if (base_ == nullptr)
    throw std::logic_error("a collective ran before its FusionBuffer was allocated");
}

void check_collective(const plan::Collective& collective, std::vector<CommTensor> inputs,
                      std::vector<CommTensor> outputs, size_t group_size) {
  if (is_row_exchange(collective.kind())) {
    check_row_exchange(collective, inputs, outputs, group_size);
    return;
  }
  checked_pairs(collective, std::move(inputs), std::move(outputs), group_size);
}

std::unique_ptr<PreparedKernel> prepare_collective(const plan::Collective& collective,
                                                   std::vector<CommTensor> inputs,
                                                   std::vector<CommTensor> outputs,
                                                   Communicator& communicator, Backend& memory,
                                                   FusionBuffer& fusion) {
  if (is_row_exchange(collective.kind())) {
    return prepare_row_exchange(collective, std::move(inputs), std::move(outputs), communicator,
                                memory);
  }
  std::vector<Pair> pairs = checked_pairs(collective, std::move(inputs), std::move(outputs),
                                          static_cast<size_t>(communicator.size()));
  const ElementType type =
      pairs.empty() ? ElementType::kFloat32
                    : element_type(pairs[0].in.view.dtype).value_or(ElementType::kFloat32);
  return std::make_unique<CollectiveKernel>(collective.kind(), collective.average(),
                                            collective.root(), std::move(pairs), type, communicator,
                                            memory, fusion);
}

std::unique_ptr<PreparedKernel> prepare_send(CommTensor tensor, int peer, int tag,
                                             Communicator& communicator) {
  if (!tensor.view.present()) throw Error("send of a missing tensor");
  return std::make_unique<TransferKernel>(std::move(tensor), peer, tag, true, communicator);
}

std::unique_ptr<PreparedKernel> prepare_recv(CommTensor tensor, int peer, int tag,
                                             Communicator& communicator) {
  if (!tensor.view.present()) throw Error("recv into a missing tensor");
  return std::make_unique<TransferKernel>(std::move(tensor), peer, tag, false, communicator);
}

}  // namespace piper::engine
