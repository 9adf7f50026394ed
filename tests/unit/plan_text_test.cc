// piper-dump's text form of a plan, and the plan file's refusal of damaged files.
#include "formats/plan_text.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "formats/error.h"
#include "formats/lr_schedule.h"
#include "formats/plan_file.h"

namespace piper::formats {
namespace {

int add_tensor(plan::Plan& plan, const std::string& name, plan::DType dtype,
               std::vector<int64_t> shape, plan::Role role) {
  plan::Tensor* tensor = plan.add_tensors();
  tensor->set_name(name);
  tensor->set_dtype(dtype);
  for (int64_t extent : shape) {
    tensor->add_shape(extent);
  }
  tensor->set_role(role);
  tensor->set_microbatch(role == plan::ACTIVATION ? 0 : -1);
  return plan.tensors_size() - 1;
}

plan::Instruction* add_kernel(plan::Stream& stream, const std::string& op_type, plan::Pass pass,
                              const std::string& label, std::vector<int32_t> inputs,
                              std::vector<int32_t> outputs) {
  plan::Instruction* instruction = stream.add_instructions();
  instruction->set_pass(pass);
  instruction->set_microbatch(pass == plan::UPDATE ? -1 : 0);
  instruction->set_label(label);
  plan::Kernel* kernel = instruction->mutable_kernel();
  kernel->set_op_type(op_type);
  for (int32_t input : inputs) {
    kernel->add_inputs(input);
  }
  for (int32_t output : outputs) {
    kernel->add_outputs(output);
  }
  return instruction;
}

// A hand-built plan: one Gemm forward, its input gradient, and an SGD update.
plan::Plan small_plan() {
  plan::Plan plan;
  plan::Header* header = plan.mutable_header();
  header->set_format_version(kPlanFormatVersion);
  header->set_rank(0);
  header->set_world_size(1);
  header->set_plan_id("0123abcd");
  header->set_model_path("/models/mlp.onnx");
  header->set_planner_version("0.1.0");
  plan.set_global_batch(32);

  const int x = add_tensor(plan, "x", plan::FLOAT32, {32, 64}, plan::INPUT);
  const int w = add_tensor(plan, "W", plan::FLOAT32, {64, 64}, plan::PARAMETER);
  const int y = add_tensor(plan, "Y", plan::FLOAT32, {32, 64}, plan::ACTIVATION);
  const int dy = add_tensor(plan, "dY", plan::FLOAT32, {32, 64}, plan::GRADIENT);
  const int dx = add_tensor(plan, "dX", plan::FLOAT32, {32, 64}, plan::GRADIENT);
  const int dw = add_tensor(plan, "dW", plan::FLOAT32, {64, 64}, plan::GRADIENT);
  const int loss = add_tensor(plan, "loss", plan::FLOAT32, {}, plan::LOSS);

  plan::Stream* stream = plan.add_streams();
  stream->set_name("compute");
  for (int i = 0; i < 10; ++i) {  // padding, so that indices reach two digits
    add_kernel(*stream, "Identity", plan::FORWARD, "pad" + std::to_string(i), {x}, {y});
  }
  plan::Instruction* forward =
      add_kernel(*stream, "Gemm", plan::FORWARD, "/fc2/Gemm", {x, w, -1}, {y});
  plan::Attribute* trans_b = forward->mutable_kernel()->add_attributes();
  trans_b->set_name("transB");
  trans_b->set_i(1);
  add_kernel(*stream, "Gemm", plan::BACKWARD, "/fc2/Gemm_grad_A", {dy, w}, {dx});
  plan::Instruction* update =
      add_kernel(*stream, "piper.SGD", plan::UPDATE, "fc2.weight_sgd", {w, dw}, {});
  plan::Attribute* lr = update->mutable_kernel()->add_attributes();
  lr->set_name("lr");
  lr->set_f(0.05);
  plan::Instruction* record = stream->add_instructions();
  record->set_pass(plan::BACKWARD_WEIGHT);
  record->set_microbatch(3);
  record->mutable_record()->set_event(2);

  plan::BatchInput* input = plan.add_inputs();
  input->set_input("x");
  input->set_tensor(x);
  input->set_sample_offset(0);
  input->set_samples(32);
  plan::ParameterLoad* parameter = plan.add_parameters();
  parameter->set_initializer("fc2.weight");
  parameter->set_tensor(w);
  plan::LossTerm* term = plan.add_loss();
  term->set_tensor(loss);
  term->set_weight(1);
  plan::Optimizer* optimizer = plan.mutable_optimizer();
  optimizer->set_type("sgd");
  optimizer->set_lr(0.05);
  optimizer->set_momentum(0.9);
  plan::MemorySummary* memory = plan.mutable_memory();
  memory->set_arena_bytes(3 * 1024 * 1024 / 2);
  memory->set_parameter_bytes(16384);
  memory->set_activation_bytes(512);
  return plan;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  return lines;
}

bool has_line(const std::string& text, const std::string& wanted) {
  for (const std::string& line : lines_of(text)) {
    if (line == wanted) {
      return true;
    }
  }
  return false;
}

TEST(PlanTextTest, InstructionLines) {
  const std::string text = plan_to_text(small_plan());
  EXPECT_TRUE(has_line(text,
                       "  10 F  mb0  Gemm  /fc2/Gemm  (x f32[32,64], W f32[64,64], -) -> "
                       "(Y f32[32,64])  {transB=1}"))
      << text;
  EXPECT_TRUE(has_line(
      text,
      "  11 B  mb0  Gemm  /fc2/Gemm_grad_A  (dY f32[32,64], W f32[64,64]) -> (dX f32[32,64])"))
      << text;
  EXPECT_TRUE(has_line(text,
                       "  12 U  mb*  piper.SGD  fc2.weight_sgd  (W f32[64,64], dW f32[64,64]) "
                       "-> ()  {lr=0.05}"))
      << text;
  EXPECT_TRUE(has_line(text, "  13 BW mb3  record  event 2")) << text;
  EXPECT_TRUE(has_line(text, "   0 F  mb0  Identity  pad0  (x f32[32,64]) -> (Y f32[32,64])"))
      << text;
  EXPECT_TRUE(has_line(text, "stream 'compute' (14 instructions):")) << text;
}

TEST(PlanTextTest, HeaderMemoryAndSettings) {
  const std::string text = plan_to_text(small_plan());
  EXPECT_EQ(lines_of(text).at(0), "plan: rank 0 of 1") << text;
  EXPECT_TRUE(has_line(text, "  format version   " + std::to_string(kPlanFormatVersion))) << text;
  EXPECT_TRUE(has_line(text, "  plan id          0123abcd")) << text;
  EXPECT_TRUE(has_line(text, "  model            /models/mlp.onnx")) << text;
  EXPECT_TRUE(has_line(text, "  global batch     32")) << text;
  EXPECT_TRUE(has_line(text, "memory: arena 1.50 MiB (1572864 B)")) << text;
  EXPECT_TRUE(has_line(text, "  parameters       16.0 KiB (16384 B)")) << text;
  EXPECT_TRUE(has_line(text, "  activations peak 512 B")) << text;
  EXPECT_TRUE(has_line(text, "  x f32[32,64]  rows [0, 32) of each step's 32")) << text;
  EXPECT_TRUE(has_line(text, "  fc2.weight -> W f32[64,64]  parameter")) << text;
  EXPECT_TRUE(has_line(text,
                       "optimizer: sgd  lr=0.05  momentum=0.9  dampening=0  "
                       "nesterov=false  weight_decay=0"))
      << text;
  EXPECT_TRUE(has_line(text, "loss: 1 * loss f32[]")) << text;
  EXPECT_EQ(text.find("gradient norm:"), std::string::npos) << text;
}

TEST(PlanTextTest, OptimizerLineShowsTheScheduleAndClipping) {
  plan::Plan plan = small_plan();
  formats::set_lr_schedule(
      {.type = "cosine", .warmup_steps = 10, .total_steps = 100, .min_lr_ratio = 0.1},
      *plan.mutable_optimizer());
  plan.mutable_optimizer()->set_clip_grad_norm(1.0);
  const std::string text = plan_to_text(plan);
  EXPECT_TRUE(has_line(text,
                       "optimizer: sgd  lr=0.05  momentum=0.9  dampening=0  nesterov=false  "
                       "weight_decay=0  lr_schedule=cosine(warmup_steps=10, total_steps=100, "
                       "min_lr_ratio=0.1)  clip_grad_norm=1"))
      << text;
}

TEST(PlanTextTest, GradientNormNamesTheShare) {
  plan::Plan plan = small_plan();
  const int norm = add_tensor(plan, "grad_norm", plan::FLOAT32, {}, plan::ACTIVATION);
  plan.mutable_gradient_norm()->set_norm(norm);
  plan::NormedGradient& gradient = *plan.mutable_gradient_norm()->add_gradients();
  gradient.set_tensor(3);
  gradient.set_parameter("fc2.weight");
  const std::string text = plan_to_text(plan);
  EXPECT_TRUE(has_line(text, "gradient norm: grad_norm f32[], this rank's share from fc2.weight"))
      << text;
}

TEST(PlanTextTest, ParameterBlockAndShardLines) {
  plan::Plan plan = small_plan();
  plan::CommGroup* group = plan.add_groups();
  group->set_id(2);
  for (int rank : {0, 1, 2, 3}) group->add_ranks(rank);
  plan::ParameterBlock* block = plan.mutable_parameters(0)->mutable_block();
  block->set_dim(0);
  block->set_start(16);
  block->set_size(16);
  block->set_group(2);
  EXPECT_TRUE(has_line(plan_to_text(plan),
                       "  fc2.weight -> W f32[64,64]  parameter  "
                       "block: dim 0 [16, 32) of 64, group 2"))
      << plan_to_text(plan);
  // A ZeRO shard slices the block: printed after it.
  plan::ParameterShard* shard = plan.mutable_parameters(0)->mutable_shard();
  shard->set_element_offset(512);
  shard->set_element_count(512);
  shard->set_elements(1024);
  shard->set_group(5);
  block->set_dim(1);
  block->set_group(7);  // not a group of the plan: no extent
  EXPECT_TRUE(has_line(plan_to_text(plan),
                       "  fc2.weight -> W f32[64,64]  parameter  block: dim 1 [16, 32), group 7 "
                       "<unknown>  shard: elements [512, 1024) of 1024, group 5"))
      << plan_to_text(plan);
}

TEST(PlanTextTest, CommunicationLines) {
  plan::Plan plan = small_plan();
  plan::CommGroup* group = plan.add_groups();
  group->set_id(1);
  group->add_ranks(0);
  group->add_ranks(2);
  plan::Stream* stream = plan.add_streams();
  stream->set_name("dp_reduce");
  plan::Instruction* reduce = stream->add_instructions();
  reduce->set_pass(plan::BACKWARD);
  reduce->set_microbatch(-1);
  reduce->set_label("bucket0");
  plan::Collective* collective = reduce->mutable_collective();
  collective->set_kind(plan::Collective::ALL_REDUCE);
  collective->set_group(1);
  collective->add_inputs(5);
  collective->add_outputs(5);
  collective->set_average(true);
  plan::Instruction* send = stream->add_instructions();
  send->set_pass(plan::FORWARD);
  send->set_microbatch(2);
  send->mutable_send()->set_tensor(2);
  send->mutable_send()->set_peer(3);
  send->mutable_send()->set_tag(7);
  plan::Instruction* recv = stream->add_instructions();
  recv->set_pass(plan::BACKWARD);
  recv->set_microbatch(2);
  recv->mutable_recv()->set_tensor(3);
  recv->mutable_recv()->set_peer(3);
  recv->mutable_recv()->set_tag(8);
  plan::Instruction* gather = stream->add_instructions();
  gather->set_pass(plan::FORWARD);
  gather->set_microbatch(0);
  gather->mutable_collective()->set_kind(plan::Collective::ALL_GATHER);
  gather->mutable_collective()->set_group(4);

  const std::string text = plan_to_text(plan);
  EXPECT_TRUE(has_line(text, "communicator groups (1):")) << text;
  EXPECT_TRUE(has_line(text, "  1: ranks [0,2]")) << text;
  EXPECT_TRUE(has_line(text,
                       "  0 B  mb*  all-reduce  bucket0  group 1 ranks [0,2]  "
                       "(dW f32[64,64]) -> (dW f32[64,64])  {average}"))
      << text;
  EXPECT_TRUE(has_line(text, "  1 F  mb2  send  Y f32[32,64] -> rank 3  {tag=7}")) << text;
  EXPECT_TRUE(has_line(text, "  2 B  mb2  recv  dY f32[32,64] <- rank 3  {tag=8}")) << text;
  EXPECT_TRUE(has_line(text, "  3 F  mb0  all-gather  group 4 <unknown>  () -> ()")) << text;
}

TEST(PlanTextTest, DanglingTensorIndexIsShownNotFatal) {
  plan::Plan plan = small_plan();
  plan.mutable_streams(0)->mutable_instructions(10)->mutable_kernel()->set_inputs(1, 99);
  EXPECT_NE(plan_to_text(plan).find("<bad tensor 99>"), std::string::npos);
}

TEST(PlanTextTest, BytesToText) {
  EXPECT_EQ(bytes_to_text(0), "0 B");
  EXPECT_EQ(bytes_to_text(1023), "1023 B");
  EXPECT_EQ(bytes_to_text(1024), "1.00 KiB");
  EXPECT_EQ(bytes_to_text(10 * 1024 - 1), "10.0 KiB");
  EXPECT_EQ(bytes_to_text(123 * 1024 * 1024), "123 MiB");
  EXPECT_EQ(bytes_to_text(5ull << 30), "5.00 GiB");
}

TEST(PlanTextTest, JsonUsesProtoFieldNames) {
  const std::string json = plan_to_json(small_plan());
  EXPECT_NE(json.find("\"plan_id\": \"0123abcd\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"op_type\": \"Gemm\""), std::string::npos) << json;
  EXPECT_EQ(json.back(), '\n');
}

// Plan files damaged on disk are refused with a message naming the file and the damage.
class PlanFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = std::filesystem::temp_directory_path() /
                 ("piper_plan_file_test_" +
                  std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(directory_);
    path_ = (directory_ / "rank0.plan").string();
    write_plan_file(path_, small_plan());
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::string bytes() const {
    std::ifstream in(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void overwrite(const std::string& contents) const {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << contents;
  }
  // The message read_plan_file throws, or "" when it reads the file.
  std::string read_error() const {
    try {
      read_plan_file(path_);
    } catch (const Error& error) {
      return error.what();
    }
    return "";
  }

  std::filesystem::path directory_;
  std::string path_;
};

TEST_F(PlanFileTest, RoundTrip) {
  const plan::Plan plan = read_plan_file(path_);
  EXPECT_EQ(plan.SerializeAsString(), small_plan().SerializeAsString());
  EXPECT_EQ(bytes().substr(0, 8), "PIPRPLAN");
}

TEST_F(PlanFileTest, Missing) {
  std::filesystem::remove(path_);
  const std::string message = read_error();
  EXPECT_NE(message.find("cannot read '" + path_ + "'"), std::string::npos) << message;
}

TEST_F(PlanFileTest, Truncated) {
  const std::string whole = bytes();
  overwrite(whole.substr(0, whole.size() - 7));
  std::string message = read_error();
  EXPECT_NE(message.find(path_), std::string::npos) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;

  overwrite(whole.substr(0, 16));  // inside the header
  message = read_error();
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
}

TEST_F(PlanFileTest, Corrupted) {
  std::string damaged = bytes();
  damaged[damaged.size() - 5] ^= 0x5a;
  overwrite(damaged);
  const std::string message = read_error();
  EXPECT_NE(message.find(path_), std::string::npos) << message;
  EXPECT_NE(message.find("corrupted"), std::string::npos) << message;
  EXPECT_NE(message.find("checksum"), std::string::npos) << message;
}

TEST_F(PlanFileTest, BadMagic) {
  overwrite("not a plan at all, just some text\n");
  const std::string message = read_error();
  EXPECT_NE(message.find(path_), std::string::npos) << message;
  EXPECT_NE(message.find("not a Piper plan"), std::string::npos) << message;
}

TEST_F(PlanFileTest, WrongFormatVersion) {
  std::string damaged = bytes();
  damaged[8] = static_cast<char>(kPlanFormatVersion + 1);  // little-endian uint32 after the magic
  overwrite(damaged);
  const std::string message = read_error();
  EXPECT_NE(message.find(path_), std::string::npos) << message;
  EXPECT_NE(message.find("format version " + std::to_string(kPlanFormatVersion + 1)),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("re-plan"), std::string::npos) << message;
}

TEST_F(PlanFileTest, PayloadOfAnotherFormatVersionIsRefused) {
  plan::Plan plan = small_plan();
  plan.mutable_header()->set_format_version(kPlanFormatVersion + 1);
  write_plan_file(path_, plan);
  const std::string message = read_error();
  EXPECT_NE(message.find("says it has format version " + std::to_string(kPlanFormatVersion + 1)),
            std::string::npos)
      << message;
}

TEST_F(PlanFileTest, UnknownFieldsAreRefused) {
  // Field 99 (varint 1) inside the first instruction's kernel: what a newer planner might add.
  plan::Plan plan = small_plan();
  std::string kernel = plan.streams(0).instructions(0).kernel().SerializeAsString();
  kernel += std::string("\x98\x06\x01", 3);
  ASSERT_TRUE(
      plan.mutable_streams(0)->mutable_instructions(0)->mutable_kernel()->ParseFromString(kernel));
  write_plan_file(path_, plan);
  const std::string message = read_error();
  EXPECT_NE(message.find("streams[0].instructions[0].kernel: field 99"), std::string::npos)
      << message;
  EXPECT_NE(message.find("re-plan"), std::string::npos) << message;
}

TEST_F(PlanFileTest, WriteIntoMissingDirectoryFails) {
  const std::string path = (directory_ / "missing" / "rank0.plan").string();
  try {
    write_plan_file(path, small_plan());
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("cannot write"), std::string::npos) << error.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace piper::formats
