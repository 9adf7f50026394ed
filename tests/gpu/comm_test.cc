// Communication with the CUDA backend: the NCCL communicator in a world of one (every
// collective, in place and not, on device buffers, float32 and bfloat16), and two ranks sharing the
// GPU through Gloo (transfers staged through host memory) training like one rank.
#include <gloo/rendezvous/hash_store.h>
#include <gmock/gmock.h>

#include <cmath>
#include <thread>

#include "engine/comm/gloo/gloo_communicator.h"
#include "engine/comm/nccl/nccl_communicator.h"
#include "engine/runtime/data.h"
#include "engine/runtime/session.h"
#include "formats/error.h"
#include "formats/strategy.h"
#include "planner/plan_model.h"
#include "tests/gpu/op_harness.h"

namespace piper::engine::testing {
namespace {

using CudaComm = CudaTest;

// Device buffers of floats.
class DeviceFloats {
 public:
  DeviceFloats(Backend& backend, const std::vector<float>& values)
      : backend_(backend), size_(values.size()), data_(backend.allocate(values.size() * 4)) {
    backend_.upload(data_, values.data(), values.size() * 4);
  }
  ~DeviceFloats() { backend_.release(data_); }
  float* get() const { return static_cast<float*>(data_); }
  std::vector<float> read() const {
    std::vector<float> values(size_);
    backend_.download(values.data(), data_, size_ * 4);
    return values;
  }

 private:
  Backend& backend_;
  size_t size_;
  void* data_;
};

TEST_F(CudaComm, NcclWorldOfOneRunsEveryCollective) {
  gloo::rendezvous::HashStore store;
  NcclCommunicatorFactory factory(store, 0, cuda_->context(), {});
  auto group = factory.connect("group 0", {0});
  auto channel = group->channel("compute");
  ASSERT_FALSE(channel->host_buffers());
  ASSERT_EQ(channel->size(), 1);
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 4.0f};
  DeviceFloats data(*cuda_, values), out(*cuda_, {0, 0, 0, 0});
  channel->all_reduce(data.get(), 4, false);
  EXPECT_EQ(data.read(), values);
  channel->all_reduce(data.get(), 4, true);
  EXPECT_EQ(data.read(), values);
  channel->reduce_scatter(data.get(), out.get(), 4, false);
  EXPECT_EQ(out.read(), values);
  channel->reduce_scatter(data.get(), data.get() + 1, 3, false);  // overlapping, not in place
  EXPECT_EQ(data.read(), (std::vector<float>{1.5f, 1.5f, -2.0f, 3.25f}));
  DeviceFloats gathered(*cuda_, {0, 0, 0, 0});
  channel->all_gather(out.get(), gathered.get(), 4);
  EXPECT_EQ(gathered.read(), values);
  channel->all_gather(gathered.get(), gathered.get(), 4);  // in place
  EXPECT_EQ(gathered.read(), values);
  channel->broadcast(gathered.get(), 16, 0);
  EXPECT_EQ(gathered.read(), values);
  channel->all_to_all(gathered.get(), gathered.get(), 16);  // overlapping: staged
  EXPECT_EQ(gathered.read(), values);
  // bfloat16: the same contracts on two-byte elements.
  const std::vector<uint16_t> bf16 = {0x3fc0, 0xc000, 0x4050, 0x4080};  // 1.5, -2, 3.25, 4
  DeviceFloats words(*cuda_, {0, 0});                                   // four bfloat16
  auto* halves = reinterpret_cast<uint16_t*>(words.get());
  const auto read_bf16 = [&] {
    std::vector<uint16_t> bits(4);
    cuda_->download(bits.data(), words.get(), 8);
    return bits;
  };
  cuda_->upload(words.get(), bf16.data(), 8);
  channel->all_reduce(halves, 4, ElementType::kBFloat16, true);
  EXPECT_EQ(read_bf16(), bf16);
  channel->reduce_scatter(halves, halves + 1, 3, ElementType::kBFloat16, false);  // overlapping
  EXPECT_EQ(read_bf16(), (std::vector<uint16_t>{0x3fc0, 0x3fc0, 0xc000, 0x4050}));
  channel->all_gather(halves + 1, halves, 3, ElementType::kBFloat16);  // overlapping: staged
  EXPECT_EQ(read_bf16(), (std::vector<uint16_t>{0x3fc0, 0xc000, 0x4050, 0x4050}));
  channel->abort();
  EXPECT_THROW(channel->all_reduce(data.get(), 4, false), Error);
}

// samples/mlp with ZeRO-2 over two ranks, each a thread with its own CUDA backend on the one
// GPU and Gloo between them, reports on each rank the loss one rank on the CPU has.
TEST_F(CudaComm, TwoRanksSharingTheGpuThroughGlooTrainLikeOne) {
  const auto plan_for = [](const std::string& directives) {
    const strategy::Strategy strategy = strategy::parse_strategy(
        R"({"batch": {"global": 32}, "optimizer": {"type": "adamw", "lr": 0.01},
            "directives": [)" +
            directives + "]}",
        "cuda+gloo test strategy");
    return planner::plan_model(std::string(PIPER_SOURCE_DIR) + "/samples/mlp/model.onnx", strategy)
        .plans;
  };
  const auto single = plan_for("");
  const auto replicas = plan_for(R"({"op": "zero", "stage": 2, "devices": [0, 1]})");
  ASSERT_EQ(replicas.size(), 2u);
  constexpr int kSteps = 4;
  std::vector<double> expected;
  {
    Session session(single.at(0), make_backend("cpu"), {3});
    const auto source = make_synthetic_source(single.at(0), 3);
    for (int step = 0; step < kSteps; ++step) expected.push_back(session.step(source->batch(step)));
  }
  cuda_.reset();  // each rank makes its own
  gloo::rendezvous::HashStore store;
  std::vector<std::vector<double>> losses(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        GlooOptions options;
        options.timeout = std::chrono::seconds(60);
        GlooCommunicatorFactory factory(store, rank, options);
        const plan::Plan& plan = replicas.at(static_cast<size_t>(rank));
        Session session(plan, make_backend("cuda"), {3, &factory});
        const auto source = make_synthetic_source(plan, 3);
        for (int step = 0; step < kSteps; ++step) {
          losses[static_cast<size_t>(rank)].push_back(session.step(source->batch(step)));
        }
      } catch (const std::exception& error) {
        errors[static_cast<size_t>(rank)] = error.what();
      }
    });
  }
  for (auto& thread : ranks) thread.join();
  ASSERT_EQ(errors, (std::vector<std::string>{"", ""}));
  // Each rank reports the global loss: the plan all-reduces the replicas' shares.
  for (int rank = 0; rank < 2; ++rank) {
    for (int step = 0; step < kSteps; ++step) {
      const double want = expected[static_cast<size_t>(step)];
      EXPECT_NEAR(losses[static_cast<size_t>(rank)][static_cast<size_t>(step)], want,
                  1e-5 * std::abs(want))
          << "rank " << rank << ", step " << step + 1;
    }
  }
}

}  // namespace
}  // namespace piper::engine::testing
