// Session: parameter loading from ONNX, constants, batch input slicing, a full training
// step of softmax regression against its closed form, loss terms, load-time errors, and
// run_training (piper-run's loop) with metrics and --save-onnx, and checkpoints of the
// session's parameters and momentum (what a rank holds and owns, a save and load round trip,
// a ZeRO slice that leaves the rest of its parameter out).
#include "engine/runtime/session.h"

#include <gmock/gmock.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "engine/runtime/checkpoint.h"
#include "engine/runtime/checkpoint_state.h"
#include "engine/runtime/data.h"
#include "engine/runtime/run.h"
#include "engine_test_util.h"
#include "formats/atomic_file.h"
#include "formats/checksum.h"
#include "formats/error.h"
#include "formats/npy.h"
#include "formats/onnx_model.h"
#include "formats/plan_file.h"

namespace piper::engine::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kN = 4, kIn = 3, kOut = 2;
const std::vector<float> kW0 = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f};  // [3, 2]
const std::vector<float> kB0 = {0.05f, -0.05f};
const std::vector<float> kX = {1, 2, 3, -1, 0, 1, 0.5f, 0.5f, -2, 2, -1, 0};  // [4, 3]
const std::vector<int64_t> kY = {0, 1, 1, 0};
constexpr double kLr = 0.1;

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/piper_session_test_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    model_path_ = dir_ + "/model.onnx";
    WriteModel(model_path_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // logits = Gemm(x, W, b) with initializers W [3, 2] and b [2].
  static void WriteModel(const std::string& path) {
    onnx::ModelProto model;
    model.set_ir_version(8);
    auto* opset = model.add_opset_import();
    opset->set_domain("");
    opset->set_version(17);
    onnx::GraphProto* graph = model.mutable_graph();
    graph->set_name("linear");
    auto describe = [](onnx::ValueInfoProto* info, const std::string& name,
                       std::vector<int64_t> dims) {
      info->set_name(name);
      auto* type = info->mutable_type()->mutable_tensor_type();
      type->set_elem_type(onnx::TensorProto::FLOAT);
      for (int64_t dim : dims) type->mutable_shape()->add_dim()->set_dim_value(dim);
    };
    describe(graph->add_input(), "x", {kN, kIn});
    describe(graph->add_output(), "logits", {kN, kOut});
    auto add_initializer = [&](const std::string& name, std::vector<int64_t> dims,
                               const std::vector<float>& values) {
      onnx::TensorProto* tensor = graph->add_initializer();
      tensor->set_name(name);
      tensor->set_data_type(onnx::TensorProto::FLOAT);
      for (int64_t dim : dims) tensor->add_dims(dim);
      for (float value : values) tensor->add_float_data(value);
    };
    add_initializer("W", {kIn, kOut}, kW0);
    add_initializer("b", {kOut}, kB0);
    onnx::NodeProto* node = graph->add_node();
    node->set_op_type("Gemm");
    node->set_name("/fc/Gemm");
    for (const char* input : {"x", "W", "b"}) node->add_input(input);
    node->add_output("logits");
    std::ofstream(path, std::ios::binary) << model.SerializeAsString();
  }

  // One SGD step of softmax regression on the whole batch, on one stream.
  plan::Plan LinearPlan() {
    PlanBuilder b;
    b.plan().mutable_header()->set_model_path(model_path_);
    b.plan().set_global_batch(kN);
    const int x = b.Tensor("x", {kN, kIn}, plan::FLOAT32, plan::INPUT);
    const int y = b.Tensor("y", {kN}, plan::INT64, plan::INPUT);
    const int w = b.Tensor("W", {kIn, kOut}, plan::FLOAT32, plan::PARAMETER);
    const int bias = b.Tensor("b", {kOut}, plan::FLOAT32, plan::PARAMETER);
    const int logits = b.Tensor("logits", {kN, kOut});
    const int loss = b.Tensor("loss", {}, plan::FLOAT32, plan::LOSS);
    const int seed = b.Tensor("dloss", {}, plan::FLOAT32, plan::CONSTANT);
    const int dlogits = b.Tensor("dlogits", {kN, kOut});
    const int dw = b.Tensor("dW", {kIn, kOut}, plan::FLOAT32, plan::GRADIENT);
    const int db = b.Tensor("db", {kOut}, plan::FLOAT32, plan::GRADIENT);
    b.Input("x", x, 0, kN);
    b.Input("y", y, 0, kN, kOut);
    b.Parameter("W", w);
    b.Parameter("b", bias);
    b.Constant<float>(seed, {1.0f});
    b.Loss(loss);
    b.Kernel("main", "Gemm", {x, w, bias}, {logits}, {}, "/fc/Gemm");
    b.Kernel("main", "SoftmaxCrossEntropyLoss", {logits, y}, {loss});
    b.Kernel("main", "piper.SoftmaxCrossEntropyLossGrad", {seed, logits, y}, {dlogits});
    b.Kernel("main", "piper.MatMul", {x, dlogits}, {dw}, {Int("transA", 1)});
    b.Kernel("main", "piper.SumTo", {dlogits}, {db});
    b.Kernel("main", "piper.SGD", {w, dw}, {}, {Float("lr", kLr)});
    b.Kernel("main", "piper.SGD", {bias, db}, {}, {Float("lr", kLr)});
    return b.Build();
  }

  // SGD with momentum; with `zero_slice`, W's update takes slice 1 of 2 of W and of its gradient
  // through piper.Shard (as ZeRO-1 lowers it), with its momentum for that slice alone.
  plan::Plan MomentumPlan(bool zero_slice) {
    PlanBuilder b;
    b.plan().mutable_header()->set_model_path(model_path_);
    b.plan().set_global_batch(kN);
    const int x = b.Tensor("x", {kN, kIn}, plan::FLOAT32, plan::INPUT);
    const int y = b.Tensor("y", {kN}, plan::INT64, plan::INPUT);
    const int w = b.Tensor("W", {kIn, kOut}, plan::FLOAT32, plan::PARAMETER);
    const int bias = b.Tensor("b", {kOut}, plan::FLOAT32, plan::PARAMETER);
    const int logits = b.Tensor("logits", {kN, kOut});
    const int loss = b.Tensor("loss", {}, plan::FLOAT32, plan::LOSS);
    const int seed = b.Tensor("dloss", {}, plan::FLOAT32, plan::CONSTANT);
    const int dlogits = b.Tensor("dlogits", {kN, kOut});
    const int dw = b.Tensor("dW", {kIn, kOut}, plan::FLOAT32, plan::GRADIENT);
    const int db = b.Tensor("db", {kOut}, plan::FLOAT32, plan::GRADIENT);
    const int slice = kIn * kOut / 2;
    const int w_state =
        b.Tensor("optim/W/momentum_buffer", zero_slice ? Shape{slice} : Shape{kIn, kOut},
                 plan::FLOAT32, plan::OPTIMIZER_STATE);
    const int b_state =
        b.Tensor("optim/b/momentum_buffer", {kOut}, plan::FLOAT32, plan::OPTIMIZER_STATE);
    b.Input("x", x, 0, kN);
    b.Input("y", y, 0, kN, kOut);
    b.Parameter("W", w);
    b.Parameter("b", bias);
    b.Constant<float>(seed, {1.0f});
    b.Loss(loss);
    b.Kernel("main", "Gemm", {x, w, bias}, {logits}, {}, "/fc/Gemm");
    b.Kernel("main", "SoftmaxCrossEntropyLoss", {logits, y}, {loss});
    b.Kernel("main", "piper.SoftmaxCrossEntropyLossGrad", {seed, logits, y}, {dlogits});
    b.Kernel("main", "piper.MatMul", {x, dlogits}, {dw}, {Int("transA", 1)});
    b.Kernel("main", "piper.SumTo", {dlogits}, {db});
    const std::vector<plan::Attribute> sgd = {Float("lr", kLr), Float("momentum", 0.9)};
    if (zero_slice) {
      const int w_slice = b.Tensor("W/slice", {slice});
      const int dw_slice = b.Tensor("dW/slice", {slice});
      const std::vector<plan::Attribute> second = {Int("num_shards", 2), Int("shard_index", 1)};
      b.Kernel("main", "piper.Shard", {w}, {w_slice}, second);
      b.Kernel("main", "piper.Shard", {dw}, {dw_slice}, second);
      b.Kernel("main", "piper.SGD", {w_slice, dw_slice, w_state}, {}, sgd);
    } else {
      b.Kernel("main", "piper.SGD", {w, dw, w_state}, {}, sgd);
    }
    b.Kernel("main", "piper.SGD", {bias, db, b_state}, {}, sgd);
    return b.Build();
  }

  static Batch MakeBatch(const std::vector<float>& x, const std::vector<int64_t>& y) {
    Batch batch;
    batch["x"] = HostTensor{plan::FLOAT32, {kN, kIn}, {}};
    batch["x"].data.resize(x.size() * 4);
    std::memcpy(batch["x"].data.data(), x.data(), x.size() * 4);
    batch["y"] = HostTensor{plan::INT64, {kN}, {}};
    batch["y"].data.resize(y.size() * 8);
    std::memcpy(batch["y"].data.data(), y.data(), y.size() * 8);
    return batch;
  }

  std::string LoadError(const plan::Plan& plan) {
    try {
      Session session(plan, std::make_unique<cpu::CpuBackend>());
    } catch (const Error& error) {
      return error.what();
    }
    ADD_FAILURE() << "expected an error";
    return "";
  }

  std::string dir_;
  std::string model_path_;
};

TEST_F(SessionTest, TrainingStepMatchesClosedForm) {
  Session session(LinearPlan(), std::make_unique<cpu::CpuBackend>());
  ExpectNear(session.read_floats("W"), ToDouble(kW0), 0, "W loaded from the model");
  const double loss = session.step(MakeBatch(kX, kY));

  // Closed form: mean cross entropy of softmax(x W + b); dlogits = (softmax - onehot) / N.
  double expected_loss = 0;
  std::vector<double> dlogits(kN * kOut);
  for (int64_t i = 0; i < kN; ++i) {
    double z[kOut], sum = 0;
    for (int64_t j = 0; j < kOut; ++j) {
      z[j] = kB0[j];
      for (int64_t p = 0; p < kIn; ++p) z[j] += kX[i * kIn + p] * kW0[p * kOut + j];
      sum += std::exp(z[j]);
    }
    expected_loss += (std::log(sum) - z[kY[i]]) / kN;
    for (int64_t j = 0; j < kOut; ++j) {
      dlogits[i * kOut + j] = (std::exp(z[j]) / sum - (j == kY[i])) / kN;
    }
  }
  std::vector<double> w(kW0.begin(), kW0.end()), bias(kB0.begin(), kB0.end());
  for (int64_t p = 0; p < kIn; ++p)
    for (int64_t j = 0; j < kOut; ++j)
      for (int64_t i = 0; i < kN; ++i)
        w[p * kOut + j] -= kLr * kX[i * kIn + p] * dlogits[i * kOut + j];
  for (int64_t j = 0; j < kOut; ++j)
    for (int64_t i = 0; i < kN; ++i) bias[j] -= kLr * dlogits[i * kOut + j];

  EXPECT_NEAR(loss, expected_loss, 1e-6);
  ExpectNear(session.read_floats("W"), w, 1e-6, "W after one step");
  ExpectNear(session.read_floats("b"), bias, 1e-6, "b after one step");
  EXPECT_EQ(session.steps_done(), 1);

  const auto trained = session.trained_parameters();
  ASSERT_EQ(trained.size(), 2u);
  EXPECT_EQ(trained.at("W"), session.read_tensor("W"));
  EXPECT_EQ(trained.at("b"), session.read_tensor("b"));
  EXPECT_EQ(session.peak_bytes(), session.plan().memory().arena_bytes());

  // Training goes downhill.
  double previous = loss;
  for (int step = 0; step < 5; ++step) {
    const double next = session.step(MakeBatch(kX, kY));
    EXPECT_LT(next, previous);
    previous = next;
  }
}

TEST_F(SessionTest, BatchInputsTakeTheirRows) {
  PlanBuilder b;
  b.plan().set_global_batch(kN);
  const int x0 = b.Tensor("x0", {1, kIn}, plan::FLOAT32, plan::INPUT);
  const int x1 = b.Tensor("x1", {3, kIn}, plan::FLOAT32, plan::INPUT);
  const int y1 = b.Tensor("y1", {2}, plan::INT64, plan::INPUT);
  b.Input("x", x0, 0, 1);
  b.Input("x", x1, 1, 3);
  b.Input("y", y1, 2, 2);
  Session session(b.Build(), std::make_unique<cpu::CpuBackend>());
  session.step(MakeBatch(kX, kY));
  ExpectNear(session.read_floats("x0"), {1, 2, 3}, 0, "x0");
  ExpectNear(session.read_floats("x1"), {-1, 0, 1, 0.5, 0.5, -2, 2, -1, 0}, 0, "x1");
  const auto y = session.read_tensor("y1");
  int64_t values[2];
  std::memcpy(values, y.data(), sizeof values);
  EXPECT_EQ(values[0], 1);
  EXPECT_EQ(values[1], 0);

  Batch missing = MakeBatch(kX, kY);
  missing.erase("y");
  try {
    session.step(missing);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("the batch has no input 'y'"));
  }
  Batch wrong = MakeBatch(kX, kY);
  wrong["x"].shape = {6, 2};
  EXPECT_THROW(session.step(wrong), Error);
}

TEST_F(SessionTest, LossIsTheWeightedSumOfTerms) {
  PlanBuilder b;
  const int a = b.Tensor("a", {}, plan::FLOAT32, plan::CONSTANT);
  const int c = b.Tensor("c", {1}, plan::FLOAT32, plan::CONSTANT);
  b.Constant<float>(a, {2.0f});
  b.Constant<float>(c, {6.0f});
  b.Loss(a, 0.5);
  b.Loss(c, 0.25);
  Session session(b.Build(), std::make_unique<cpu::CpuBackend>());
  EXPECT_DOUBLE_EQ(session.step({}), 2.5);
}

TEST_F(SessionTest, LoadErrorsNameTheCulprit) {
  {
    plan::Plan plan = LinearPlan();
    plan.mutable_header()->set_world_size(2);
    plan.mutable_header()->set_rank(2);
    EXPECT_THAT(LoadError(plan), HasSubstr("the plan's header says rank 2 of 2"));
  }
  {
    plan::Plan plan = LinearPlan();
    plan.mutable_parameters(0)->set_initializer("W_missing");
    EXPECT_THAT(LoadError(plan),
                HasSubstr("initializer 'W_missing' of model '" + model_path_ + "' does not exist"));
  }
  {
    plan::Plan plan = LinearPlan();
    plan.mutable_parameters(1)->set_tensor(0);  // b into x: [2] vs [4, 3]
    EXPECT_THAT(LoadError(plan), HasSubstr("initializer 'b' of model '" + model_path_ +
                                           "' is float32 [2] but the plan's tensor 0 'x' is "
                                           "float32 [4, 3]"));
  }
  {
    plan::Plan plan = LinearPlan();
    plan.mutable_memory()->set_arena_bytes(64);
    EXPECT_THAT(LoadError(plan), HasSubstr("lies outside the 64-byte arena"));
  }
  {
    plan::Plan plan = LinearPlan();
    plan.mutable_tensors(2)->set_bytes(4);
    EXPECT_THAT(LoadError(plan), HasSubstr("tensor 2 'W' has 4 bytes but its shape and dtype "
                                           "need 24"));
  }
  {
    plan::Plan plan = LinearPlan();
    plan.mutable_header()->set_model_path(dir_ + "/absent.onnx");
    EXPECT_THAT(LoadError(plan), HasSubstr("absent.onnx"));
  }
  {
    plan::Plan plan = LinearPlan();
    plan.mutable_inputs(0)->set_sample_offset(1);
    EXPECT_THAT(LoadError(plan), HasSubstr("batch input 'x' takes rows [1, 5) outside the "
                                           "global batch of 4"));
  }
}

TEST_F(SessionTest, RunTrainingWritesStepsMetricsAndModel) {
  formats::write_plan_file(dir_ + "/rank0.plan", LinearPlan());
  std::filesystem::create_directories(dir_ + "/data");
  formats::NpyArray x{formats::NpyDType::kFloat32, {kN, kIn}, {}};
  x.data.resize(kX.size() * 4);
  std::memcpy(x.data.data(), kX.data(), x.data.size());
  formats::NpyArray y{formats::NpyDType::kInt64, {kN}, {}};
  y.data.resize(kY.size() * 8);
  std::memcpy(y.data.data(), kY.data(), y.data.size());
  formats::write_npy(dir_ + "/data/x.npy", x);
  formats::write_npy(dir_ + "/data/y.npy", y);

  RunOptions options;
  options.plan_path = dir_ + "/rank0.plan";
  options.steps = 3;
  options.data_dir = dir_ + "/data";
  options.metrics_path = dir_ + "/metrics.jsonl";
  options.save_onnx_path = dir_ + "/trained.onnx";
  std::ostringstream out;
  run_training(options, out);

  const std::regex step_line(R"(step (\d) loss (\d+\.\d{6}) \(\d+\.\d{3} s, \d+ samples/s\))");
  std::istringstream lines(out.str());
  std::string line;
  int steps = 0;
  while (std::getline(lines, line)) {
    if (std::regex_match(line, step_line)) ++steps;
  }
  EXPECT_EQ(steps, 3) << out.str();

  // The same training in a Session gives the saved weights and the logged losses.
  Session session(LinearPlan(), std::make_unique<cpu::CpuBackend>());
  std::vector<double> losses;
  for (int step = 0; step < 3; ++step) losses.push_back(session.step(MakeBatch(kX, kY)));

  std::ifstream metrics(dir_ + "/metrics.jsonl");
  int count = 0;
  while (std::getline(metrics, line)) {
    const auto json = nlohmann::json::parse(line);
    EXPECT_EQ(json.at("step").get<int>(), count + 1);
    EXPECT_DOUBLE_EQ(json.at("loss").get<double>(), losses[count]);
    EXPECT_GE(json.at("seconds").get<double>(), 0.0);
    EXPECT_GE(json.at("samples_per_s").get<double>(), 0.0);
    EXPECT_EQ(json.at("peak_bytes").get<uint64_t>(), session.peak_bytes());
    // The process holds at least the arena.
    EXPECT_GE(json.at("peak_rss_bytes").get<uint64_t>(), session.peak_bytes());
    ++count;
  }
  EXPECT_EQ(count, 3);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/metrics.jsonl.tmp"));

  const onnx::ModelProto saved = formats::load_onnx_model(dir_ + "/trained.onnx");
  const auto trained = session.trained_parameters();
  for (const auto& initializer : saved.graph().initializer()) {
    EXPECT_EQ(formats::initializer_bytes(initializer), trained.at(initializer.name()))
        << initializer.name();
  }
}

TEST_F(SessionTest, PlanOfAnotherPlannerBuildRunsOnlyWhenAllowed) {
  plan::Plan plan = LinearPlan();
  plan.mutable_header()->set_planner_version("0.0.1+0123456789ab");
  formats::write_plan_file(dir_ + "/rank0.plan", plan);
  RunOptions options;
  options.plan_path = dir_ + "/rank0.plan";
  options.steps = 1;
  std::ostringstream out;
  try {
    run_training(options, out);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("made by piper-plan 0.0.1+0123456789ab"));
    EXPECT_THAT(error.what(), HasSubstr("--allow-other-planner"));
  }
  options.allow_other_planner = true;
  run_training(options, out);
  EXPECT_THAT(out.str(), HasSubstr("step 1 loss"));
}

TEST_F(SessionTest, ChangedModelIsRefused) {
  plan::Plan plan = LinearPlan();
  const uint64_t checksum = formats::fnv1a64(formats::read_file(model_path_));
  plan.mutable_header()->set_model_checksum(checksum);
  Session(plan, std::make_unique<cpu::CpuBackend>());  // the model as planned loads
  plan.mutable_header()->set_model_checksum(checksum + 1);
  try {
    Session(plan, std::make_unique<cpu::CpuBackend>());
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("'" + model_path_ + "' changed after planning"));
  }
}

TEST_F(SessionTest, FailedRunLeavesNoMetricsFile) {
  formats::write_plan_file(dir_ + "/rank0.plan", LinearPlan());
  std::filesystem::create_directories(dir_ + "/data");
  formats::NpyArray x{formats::NpyDType::kFloat32, {1, kIn}, std::vector<uint8_t>(kIn * 4)};
  formats::NpyArray y{formats::NpyDType::kInt64, {1}, std::vector<uint8_t>(8)};
  y.data[0] = 7;  // label 7 of 2 classes
  formats::write_npy(dir_ + "/data/x.npy", x);
  formats::write_npy(dir_ + "/data/y.npy", y);
  RunOptions options;
  options.plan_path = dir_ + "/rank0.plan";
  options.data_dir = dir_ + "/data";
  options.metrics_path = dir_ + "/metrics.jsonl";
  std::ostringstream out;
  try {
    run_training(options, out);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("label 7"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/metrics.jsonl"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/metrics.jsonl.tmp"));
}

TEST_F(SessionTest, CheckpointStateNamesWhatTheRankHoldsAndOwns) {
  Session whole(MomentumPlan(false), std::make_unique<cpu::CpuBackend>());
  std::map<std::string, HeldTensor> held;
  for (HeldTensor& tensor : held_state(whole)) held.emplace(tensor.name, std::move(tensor));
  ASSERT_EQ(held.size(), 4u);
  EXPECT_EQ(held.at("W").shape, (std::vector<int64_t>{kIn, kOut}));
  EXPECT_EQ(held.at("optim/W/momentum_buffer").shape, (std::vector<int64_t>{kIn, kOut}));
  EXPECT_EQ(held.at("optim/b/momentum_buffer").owned_slice(), formats::TensorSlice{});

  // ZeRO: the rank holds W whole but owns, as its momentum, elements [3, 6) alone.
  Session sliced(MomentumPlan(true), std::make_unique<cpu::CpuBackend>());
  held.clear();
  for (HeldTensor& tensor : held_state(sliced)) held.emplace(tensor.name, std::move(tensor));
  const formats::TensorSlice second{{}, {}, true, 3, 3};
  EXPECT_EQ(held.at("W").slice, formats::TensorSlice{});
  EXPECT_EQ(held.at("W").owned_slice(), second);
  EXPECT_EQ(held.at("optim/W/momentum_buffer").slice, second);
  EXPECT_EQ(held.at("optim/b/momentum_buffer").owned_slice(), formats::TensorSlice{});
}

TEST_F(SessionTest, CheckpointRoundTripContinuesExactly) {
  Session trained(MomentumPlan(false), std::make_unique<cpu::CpuBackend>());
  for (int step = 0; step < 2; ++step) trained.step(MakeBatch(kX, kY));
  const std::string folder =
      save_checkpoint(trained, dir_ + "/checkpoints", {2, 2, 5, "test data", std::nullopt}, 0);
  EXPECT_EQ(latest_checkpoint(dir_ + "/checkpoints"), folder);

  Session resumed(MomentumPlan(false), std::make_unique<cpu::CpuBackend>());
  const TrainingPosition position = load_checkpoint(resumed, folder, 5);
  EXPECT_EQ(position.step, 2);
  EXPECT_EQ(resumed.steps_done(), 2);
  EXPECT_EQ(resumed.updates_done(), 2);
  for (const HeldTensor& tensor : held_state(trained)) {
    EXPECT_EQ(resumed.read_tensor_at(tensor.tensor), trained.read_tensor_at(tensor.tensor))
        << tensor.name;
  }
  EXPECT_EQ(resumed.step(MakeBatch(kX, kY)), trained.step(MakeBatch(kX, kY)));
  EXPECT_EQ(resumed.read_floats("W"), trained.read_floats("W"));

  EXPECT_THAT([&] { load_checkpoint(resumed, folder, 6); },
              ::testing::ThrowsMessage<Error>(HasSubstr("pass --seed 5")));
}

TEST_F(SessionTest, CheckpointOfOneZeroSliceCannotFillTheWholeParameter) {
  Session sliced(MomentumPlan(true), std::make_unique<cpu::CpuBackend>());
  sliced.step(MakeBatch(kX, kY));
  const std::string folder =
      save_checkpoint(sliced, dir_ + "/checkpoints", {1, 1, 0, "", std::nullopt}, 0);
  Session other(MomentumPlan(true), std::make_unique<cpu::CpuBackend>());
  EXPECT_THAT([&] { load_checkpoint(other, folder, 0); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr("the checkpoint's shards of 'W' leave out elements of whole")));
}

}  // namespace
}  // namespace piper::engine::testing
