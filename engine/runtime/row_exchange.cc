#include "engine/runtime/row_exchange.h"

#include <cstddef>
#include <string>

#include "formats/error.h"

namespace piper::engine {
namespace {

int64_t rows(const TensorView& view) { return view.shape.empty() ? 1 : view.shape[0]; }

size_t row_bytes(const TensorView& view) {
  return rows(view) > 0 ? view.bytes() / static_cast<size_t>(rows(view)) : 0;
}

void check_int64(const CommTensor& tensor, int64_t elements, const std::string& what) {
  if (tensor.view.dtype != plan::INT64 || tensor.view.elements() != elements) {
    throw Error(what + " " + tensor.label + " must be int64 with " + std::to_string(elements) +
                " element(s), got " + dtype_name(tensor.view.dtype) + " with " +
                std::to_string(tensor.view.elements()));
  }
}

// The rows of `pieces` must be of one dtype and size, `like`'s.
void check_pieces(const std::vector<CommTensor>& pieces, const CommTensor& like,
                  const std::string& name) {
  for (const CommTensor& piece : pieces) {
    if (piece.view.dtype != like.view.dtype || row_bytes(piece.view) != row_bytes(like.view)) {
      throw Error(name + ": " + piece.label + " (" + dtype_name(piece.view.dtype) + ", " +
                  std::to_string(row_bytes(piece.view)) + " bytes a row) and " + like.label + " (" +
                  dtype_name(like.view.dtype) + ", " + std::to_string(row_bytes(like.view)) +
                  " bytes a row) must hold the same rows");
    }
  }
}

class RowExchangeKernel : public PreparedKernel {
 public:
  RowExchangeKernel(bool dispatch, std::vector<CommTensor> inputs, std::vector<CommTensor> outputs,
                    Communicator& communicator, Backend& memory)
      : dispatch_(dispatch),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)),
        communicator_(communicator),
        memory_(memory),
        n_(static_cast<size_t>(communicator.size())),
        name_(dispatch ? "all_to_all_v" : "all_to_all_v_return") {
    if (!communicator_.host_buffers()) {
      counts_ = static_cast<int64_t*>(memory_.allocate(2 * n_ * sizeof(int64_t)));
    }
  }
  ~RowExchangeKernel() override { memory_.release(counts_); }
  RowExchangeKernel(const RowExchangeKernel&) = delete;
  RowExchangeKernel& operator=(const RowExchangeKernel&) = delete;

  void run(const StepContext&) override {
    std::vector<int64_t> sent(n_), received(n_);
    if (dispatch_) {
      for (size_t j = 0; j < n_; ++j) sent[j] = read(inputs_[n_ + j].view);
    } else {
      memory_.download(sent.data(), inputs_[1].view.data, n_ * sizeof(int64_t));
    }
    check_sent(sent);
    exchange_counts(sent, received);
    std::vector<const void*> send(n_);
    std::vector<void*> recv(n_);
    std::vector<size_t> send_bytes(n_), recv_bytes(n_);
    const size_t row = row_bytes(dispatch_ ? inputs_[0].view : outputs_[0].view);
    int64_t sent_before = 0, received_before = 0;
    for (size_t j = 0; j < n_; ++j) {
      send_bytes[j] = static_cast<size_t>(sent[j]) * row;
      recv_bytes[j] = static_cast<size_t>(received[j]) * row;
      if (dispatch_) {
        send[j] = inputs_[j].view.data;
        recv[j] = outputs_[0].view.as<uint8_t>() + static_cast<size_t>(received_before) * row;
      } else {
        send[j] = inputs_[0].view.as<const uint8_t>() + static_cast<size_t>(sent_before) * row;
        recv[j] = outputs_[j].view.data;
      }
      sent_before += sent[j];
      received_before += received[j];
    }
    check_received(received, received_before);
    communicator_.all_to_all_v(send, send_bytes, recv, recv_bytes);
    if (dispatch_ && outputs_.size() == 3) {
      memory_.upload(outputs_[1].view.data, &received_before, sizeof received_before);
      memory_.upload(outputs_[2].view.data, received.data(), n_ * sizeof(int64_t));
    }
  }

 private:
  int64_t read(const TensorView& view) const {
    int64_t value = 0;
    memory_.download(&value, view.data, sizeof value);
    return value;
  }

  std::string member_text(size_t j) const {
    return "member " + std::to_string(j) + " of a group of " + std::to_string(n_);
  }

  // What this member sends fits the tensors it sends from.
  void check_sent(const std::vector<int64_t>& sent) const {
    int64_t total = 0;
    for (size_t j = 0; j < n_; ++j) {
      const int64_t bound = dispatch_ ? rows(inputs_[j].view) : rows(inputs_[0].view) - total;
      if (sent[j] < 0 || sent[j] > bound) {
        throw Error(name_ + ": " + std::to_string(sent[j]) + " rows for " + member_text(j) +
                    " do not fit " + inputs_[dispatch_ ? j : 0].label + " (" +
                    std::to_string(bound) + " rows left)");
      }
      total += sent[j];
    }
  }

  // What arrives fits the tensors it lands in, and returns as many rows as each output expects.
  void check_received(const std::vector<int64_t>& received, int64_t total) const {
    if (dispatch_) {
      if (total > rows(outputs_[0].view)) {
        throw Error(name_ + ": " + std::to_string(total) + " rows arrive, more than the " +
                    std::to_string(rows(outputs_[0].view)) + " rows of " + outputs_[0].label);
      }
      if (inputs_.size() == 2 * n_ + 1 && total != read(inputs_[2 * n_].view)) {
        throw Error(name_ + ": " + std::to_string(total) + " rows arrive, but " +
                    inputs_[2 * n_].label + " says " + std::to_string(read(inputs_[2 * n_].view)) +
                    " (the exchange it is aligned with received that many)");
      }
      return;
    }
    for (size_t j = 0; j < n_; ++j) {
      const int64_t expected = read(inputs_[2 + j].view);
      if (received[j] != expected || received[j] > rows(outputs_[j].view)) {
        throw Error(name_ + ": " + member_text(j) + " returns " + std::to_string(received[j]) +
                    " rows into " + outputs_[j].label + ", which expects " +
                    std::to_string(expected) + " (" + inputs_[2 + j].label + ") of at most " +
                    std::to_string(rows(outputs_[j].view)));
      }
    }
  }

  // received[j] = the rows member j sends this member.
  void exchange_counts(const std::vector<int64_t>& sent, std::vector<int64_t>& received) {
    const size_t bytes = n_ * sizeof(int64_t);
    if (counts_ == nullptr) {
      communicator_.all_to_all(sent.data(), received.data(), sizeof(int64_t));
      return;
    }
    memory_.upload(counts_, sent.data(), bytes);
    communicator_.all_to_all(counts_, counts_ + n_, sizeof(int64_t));
    memory_.download(received.data(), counts_ + n_, bytes);
  }

  bool dispatch_;
  std::vector<CommTensor> inputs_, outputs_;
  Communicator& communicator_;
  Backend& memory_;
  size_t n_;
  std::string name_;
  int64_t* counts_ = nullptr;  // sent then received counts, where the communicator needs them
};

}  // namespace

bool is_row_exchange(plan::Collective::Kind kind) {
  return kind == plan::Collective::ALL_TO_ALL_V || kind == plan::Collective::ALL_TO_ALL_V_RETURN;
}

void check_row_exchange(const plan::Collective& collective, const std::vector<CommTensor>& inputs,
                        const std::vector<CommTensor>& outputs, size_t n) {
  const bool dispatch = collective.kind() == plan::Collective::ALL_TO_ALL_V;
  const std::string name = dispatch ? "all_to_all_v" : "all_to_all_v_return";
  const auto fail_arity = [&](const std::string& expected) {
    throw Error(name + " in a group of " + std::to_string(n) + " takes " + expected + "; got " +
                std::to_string(inputs.size()) + " inputs and " + std::to_string(outputs.size()) +
                " outputs");
  };
  for (const auto* tensors : {&inputs, &outputs}) {
    for (const CommTensor& tensor : *tensors) {
      if (!tensor.view.present()) throw Error(name + ": every input and output must be given");
    }
  }
  if (dispatch) {
    const bool aligned = inputs.size() == 2 * n + 1;
    if ((inputs.size() != 2 * n && !aligned) || outputs.size() != (aligned ? 1u : 3u)) {
      fail_arity(std::to_string(n) + " pieces and their " + std::to_string(n) +
                 " counts (then the total they align with and one output, or three outputs)");
    }
    check_pieces({inputs.begin(), inputs.begin() + static_cast<ptrdiff_t>(n)}, outputs[0], name);
    for (size_t j = n; j < inputs.size(); ++j) check_int64(inputs[j], 1, name + ": the count");
    if (!aligned) {
      check_int64(outputs[1], 1, name + ": the total");
      check_int64(outputs[2], static_cast<int64_t>(n), name + ": the counts");
    }
    return;
  }
  if (inputs.size() != n + 2 || outputs.size() != n) {
    fail_arity("the rows, their counts and " + std::to_string(n) + " counts, and " +
               std::to_string(n) + " outputs");
  }
  check_pieces(outputs, inputs[0], name);
  check_int64(inputs[1], static_cast<int64_t>(n), name + ": the counts");
  for (size_t j = 2; j < inputs.size(); ++j) check_int64(inputs[j], 1, name + ": the count");
}

std::unique_ptr<PreparedKernel> prepare_row_exchange(const plan::Collective& collective,
                                                     std::vector<CommTensor> inputs,
                                                     std::vector<CommTensor> outputs,
                                                     Communicator& communicator, Backend& memory) {
  check_row_exchange(collective, inputs, outputs, static_cast<size_t>(communicator.size()));
  return std::make_unique<RowExchangeKernel>(collective.kind() == plan::Collective::ALL_TO_ALL_V,
                                             std::move(inputs), std::move(outputs), communicator,
                                             memory);
}

}  // namespace piper::engine
