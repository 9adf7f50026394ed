// Tensor-parallel parameter blocks (ParameterLoad.block): each rank loads its block of a
// model initializer along any dimension (float32, bfloat16 and int64; inline and external
// data), with a ZeRO shard of the block on top, and trained_parameters (what --save-onnx
// writes) rebuilds every initializer bit for bit. Expected bytes are cut out of the
// initializer here by index arithmetic, independent of the engine's row layout.
#include <gmock/gmock.h>

#include <filesystem>
#include <fstream>

#include "engine/runtime/session.h"
#include "engine_test_util.h"
#include "formats/error.h"
#include "formats/onnx_model.h"
#include "onnx_builder.h"
#include "session_ranks.h"

namespace piper::engine::testing {
namespace {

using ::testing::HasSubstr;

// One initializer of the test model: its bytes, and where the model keeps them.
struct Initializer {
  std::string name;
  plan::DType dtype;
  Shape dims;
  std::vector<uint8_t> bytes;
  enum Storage { kTyped, kRaw, kExternal } storage;
};

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// Distinct values, exact in their dtype (bfloat16: the bits themselves).
Initializer Make(const std::string& name, plan::DType dtype, const Shape& dims,
                 Initializer::Storage storage) {
  const int64_t n = num_elements(dims);
  std::vector<uint8_t> bytes;
  if (dtype == plan::FLOAT32) {
    std::vector<float> values;
    for (int64_t i = 0; i < n; ++i) values.push_back(0.25f * static_cast<float>(i) - 3.0f);
    bytes = Bytes(values);
  } else if (dtype == plan::BFLOAT16) {
    std::vector<uint16_t> values;
    for (int64_t i = 0; i < n; ++i) values.push_back(static_cast<uint16_t>(0x3f80 + 3 * i));
    bytes = Bytes(values);
  } else {
    std::vector<int64_t> values;
    for (int64_t i = 0; i < n; ++i) values.push_back(i * 1000000007 - 5);
    bytes = Bytes(values);
  }
  return {name, dtype, dims, bytes, storage};
}

int OnnxType(plan::DType dtype) {
  return dtype == plan::FLOAT32    ? onnx::TensorProto::FLOAT
         : dtype == plan::BFLOAT16 ? onnx::TensorProto::BFLOAT16
                                   : onnx::TensorProto::INT64;
}

// The model: y = Identity(x) beside the initializers, external ones in weights.bin.
void WriteModel(const std::string& dir, const std::vector<Initializer>& initializers) {
  piper::testing::OnnxBuilder builder;
  builder.input("x", {1}).output("y", {1}).node("Identity", {"x"}, {"y"});
  onnx::ModelProto model = builder.model();
  std::ofstream weights(dir + "/weights.bin", std::ios::binary);
  size_t offset = 0;
  for (const Initializer& init : initializers) {
    onnx::TensorProto* tensor = model.mutable_graph()->add_initializer();
    tensor->set_name(init.name);
    tensor->set_data_type(OnnxType(init.dtype));
    for (int64_t dim : init.dims) tensor->add_dims(dim);
    const size_t element = dtype_size(init.dtype);
    switch (init.storage) {
      case Initializer::kRaw:
        tensor->set_raw_data(init.bytes.data(), init.bytes.size());
        break;
      case Initializer::kExternal: {
        weights.write(reinterpret_cast<const char*>(init.bytes.data()),
                      static_cast<std::streamsize>(init.bytes.size()));
        tensor->set_data_location(onnx::TensorProto::EXTERNAL);
        for (const auto& [key, value] :
             {std::pair<std::string, std::string>{"location", "weights.bin"},
              {"offset", std::to_string(offset)},
              {"length", std::to_string(init.bytes.size())}}) {
          auto* entry = tensor->add_external_data();
          entry->set_key(key);
          entry->set_value(value);
        }
        offset += init.bytes.size();
        break;
      }
      case Initializer::kTyped:
        for (size_t at = 0; at < init.bytes.size(); at += element) {
          if (init.dtype == plan::FLOAT32) {
            float value;
            std::memcpy(&value, &init.bytes[at], element);
            tensor->add_float_data(value);
          } else if (init.dtype == plan::BFLOAT16) {
            uint16_t bits;  // ONNX keeps each bfloat16 in an int32
            std::memcpy(&bits, &init.bytes[at], element);
            tensor->add_int32_data(bits);
          } else {
            int64_t value;
            std::memcpy(&value, &init.bytes[at], element);
            tensor->add_int64_data(value);
          }
        }
        break;
    }
  }
  std::ofstream(dir + "/model.onnx", std::ios::binary) << model.SerializeAsString();
}

// initializer[..., start : start + size, ...] along `dim`, element by element.
std::vector<uint8_t> CutBlock(const Initializer& init, int dim, int64_t start, int64_t size) {
  Shape block = init.dims;
  block[static_cast<size_t>(dim)] = size;
  const size_t element = dtype_size(init.dtype);
  std::vector<uint8_t> out;
  for (int64_t i = 0; i < num_elements(block); ++i) {
    std::vector<int64_t> index = Unravel(i, block);
    index[static_cast<size_t>(dim)] += start;
    int64_t flat = 0;
    for (size_t d = 0; d < index.size(); ++d) flat = flat * init.dims[d] + index[d];
    const auto* from = &init.bytes[static_cast<size_t>(flat) * element];
    out.insert(out.end(), from, from + element);
  }
  return out;
}

// Loads of one plan: the tensor a load fills, the block and the shard (count 0: none).
struct Load {
  const Initializer* init;
  Shape tensor_shape;
  int dim;
  int64_t start, size;
  int block_group;
  int64_t shard_offset = 0, shard_count = 0;
  int shard_group = 0;
};

plan::Plan BlockPlan(const std::string& model_path, const std::vector<Load>& loads, int rank,
                     int world) {
  PlanBuilder b;
  b.plan().mutable_header()->set_model_path(model_path);
  for (const Load& load : loads) {
    const int tensor =
        b.Tensor(load.init->name, load.tensor_shape, load.init->dtype, plan::PARAMETER);
    b.Parameter(load.init->name, tensor);
    plan::ParameterLoad* parameter = b.plan().mutable_parameters(b.plan().parameters_size() - 1);
    plan::ParameterBlock* block = parameter->mutable_block();
    block->set_dim(load.dim);
    block->set_start(load.start);
    block->set_size(load.size);
    block->set_group(load.block_group);
    if (load.shard_count == 0) continue;
    plan::ParameterShard* shard = parameter->mutable_shard();
    shard->set_element_offset(load.shard_offset);
    shard->set_element_count(load.shard_count);
    shard->set_elements(num_elements(load.init->dims) /
                        load.init->dims[static_cast<size_t>(load.dim)] * load.size);
    shard->set_group(load.shard_group);
  }
  plan::Plan plan = b.Build();
  SetRank(plan, rank, world);
  return plan;
}

// What the load's tensor must hold: its block, or the shard's slice of it, zero past the slice.
std::vector<uint8_t> Expected(const Load& load) {
  const std::vector<uint8_t> block = CutBlock(*load.init, load.dim, load.start, load.size);
  if (load.shard_count == 0) return block;
  const size_t element = dtype_size(load.init->dtype);
  std::vector<uint8_t> slice(static_cast<size_t>(num_elements(load.tensor_shape)) * element, 0);
  std::memcpy(slice.data(), block.data() + load.shard_offset * element,
              static_cast<size_t>(load.shard_count) * element);
  return slice;
}

class SessionBlockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/piper_session_block_test_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    WriteModel(dir_, {a_, b_, i_, h_, c_, d_, e_});
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string model_path() const { return dir_ + "/model.onnx"; }

  // Runs the plans of `loads(rank)` on `world` ranks: every tensor must hold its expected
  // bytes and trained_parameters every initializer whole; rank 0 saves the model and every
  // initializer of the saved one must be the original.
  void ExpectLoadedAndRebuilt(int world, const std::function<plan::Plan(int)>& plan_of,
                              const std::function<std::vector<Load>(int)>& loads) {
    const auto errors = RunRanks(world, [&](int rank, CommunicatorFactory& factory) {
      Session session(plan_of(rank), std::make_unique<cpu::CpuBackend>(), {0, &factory});
      for (const Load& load : loads(rank)) {
        EXPECT_EQ(session.read_tensor(load.init->name), Expected(load))
            << "rank " << rank << " loads " << load.init->name;
      }
      const auto trained = session.trained_parameters();
      for (const Load& load : loads(rank)) {
        EXPECT_EQ(trained.at(load.init->name), load.init->bytes)
            << "rank " << rank << " rebuilds " << load.init->name;
      }
      if (rank != 0) return;
      const onnx::ModelProto model = formats::load_onnx_model(model_path());
      formats::save_onnx_with_initializers(
          model, trained, formats::ExternalData(model, model_path()), dir_ + "/trained.onnx");
      const onnx::ModelProto saved = formats::load_onnx_model(dir_ + "/trained.onnx");
      for (const Load& load : loads(rank)) {
        bool found = false;
        for (const auto& initializer : saved.graph().initializer()) {
          if (initializer.name() != load.init->name) continue;
          found = true;
          EXPECT_EQ(formats::initializer_bytes(initializer), load.init->bytes)
              << "saved " << load.init->name;
        }
        EXPECT_TRUE(found) << load.init->name;
      }
    });
    EXPECT_EQ(errors, std::vector<std::string>(static_cast<size_t>(world), ""));
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
  const Initializer a_ = Make("A", plan::FLOAT32, {4, 6}, Initializer::kTyped);
  const Initializer b_ = Make("B", plan::FLOAT32, {3, 4, 6}, Initializer::kExternal);
  const Initializer i_ = Make("I", plan::INT64, {4, 3}, Initializer::kTyped);
  const Initializer h_ = Make("H", plan::BFLOAT16, {3, 4}, Initializer::kTyped);
  const Initializer c_ = Make("C", plan::FLOAT32, {5, 6}, Initializer::kExternal);
  const Initializer d_ = Make("D", plan::BFLOAT16, {2, 5}, Initializer::kRaw);
  const Initializer e_ = Make("E", plan::FLOAT32, {4, 2}, Initializer::kRaw);
};

// Two ranks of tensor parallelism over group 0: blocks along dims 0, 1 (the middle of three)
// and the last, of every dtype, inline and external.
TEST_F(SessionBlockTest, TwoRanksLoadTheirBlocksAndSaveTheWholeModel) {
  const auto loads = [&](int rank) {
    return std::vector<Load>{
        {&a_, {2, 6}, 0, 2 * rank, 2, 0}, {&b_, {3, 2, 6}, 1, 2 * rank, 2, 0},
        {&i_, {2, 3}, 0, 2 * rank, 2, 0}, {&h_, {3, 2}, 1, 2 * rank, 2, 0},
        {&c_, {5, 3}, 1, 3 * rank, 3, 0},
    };
  };
  ExpectLoadedAndRebuilt(
      2,
      [&](int rank) {
        plan::Plan plan = BlockPlan(model_path(), loads(rank), rank, 2);
        AddGroup(plan, 0, {0, 1});
        return plan;
      },
      loads);
}

// Tensor parallelism of 2 inside data parallelism of 2 (rank = 2 dp + tp): blocks over the tp
// groups 10 + dp, ZeRO shards of each block over the dp groups 20 + tp, the last shard short
// (15 and 5 elements over 2) and bfloat16 slices of an odd byte count in whole floats.
TEST_F(SessionBlockTest, ZeroShardsOfBlocksAreGatheredBeforeTheBlocks) {
  const auto loads = [&](int rank) {
    const int dp = rank / 2, tp = rank % 2;
    return std::vector<Load>{
        {&c_, {8}, 1, 3 * tp, 3, 10 + dp, 8 * dp, dp == 0 ? 8 : 7, 20 + tp},
        {&d_, {3}, 0, tp, 1, 10 + dp, 3 * dp, dp == 0 ? 3 : 2, 20 + tp},
        {&e_, {2, 2}, 0, 2 * tp, 2, 10 + dp},
    };
  };
  ExpectLoadedAndRebuilt(
      4,
      [&](int rank) {
        plan::Plan plan = BlockPlan(model_path(), loads(rank), rank, 4);
        AddGroup(plan, 10, {0, 1});
        AddGroup(plan, 11, {2, 3});
        AddGroup(plan, 20, {0, 2});
        AddGroup(plan, 21, {1, 3});
        return plan;
      },
      loads);
}

TEST_F(SessionBlockTest, BlocksOutsideTheInitializerOrTheGroupAreRefused) {
  const std::string what = "initializer 'A' of model '" + model_path() + "'";
  const auto error = [&](Load load, const std::function<void(plan::Plan&)>& edit = {}) {
    plan::Plan plan = BlockPlan(model_path(), {load}, 1, 2);
    AddGroup(plan, 0, {0, 1});
    if (edit) edit(plan);
    return LoadError(plan);
  };
  EXPECT_THAT(error({&a_, {2, 6}, 2, 0, 2, 0}),
              HasSubstr(what + ": the plan's block is along dim 2, but the initializer's shape "
                               "[4, 6] has 2 dimensions"));
  EXPECT_THAT(error({&a_, {2, 6}, 0, 3, 2, 0}),
              HasSubstr(what + ": the plan's block dim 0 [3, 5) is not within [0, 4) of dim 0"));
  EXPECT_THAT(error({&a_, {3, 6}, 0, 2, 2, 0}),
              HasSubstr(what + " is float32 [4, 6], whose block dim 0 [2, 4) is [2, 6], but the "
                               "plan's tensor 0 'A' is float32 [3, 6]"));
  EXPECT_THAT(error({&a_, {4, 2}, 1, 2, 2, 0}),
              HasSubstr(what + ": the plan gives rank 1 block dim 1 [2, 4) over group 0, but its "
                               "2 members hold consecutive blocks of one size in group order: "
                               "member 1's share of dim 1 (extent 6) is [3, 6)"));
  EXPECT_THAT(error({&a_, {2, 6}, 0, 2, 2, 3}),
              HasSubstr("over group 3, which the plan does not define"));
  EXPECT_THAT(error({&a_, {2, 6}, 0, 2, 2, 0},
                    [](plan::Plan& plan) { plan.mutable_groups(0)->set_ranks(1, 2); }),
              HasSubstr("over group 0, which does not hold rank 1"));
  EXPECT_THAT(error({&a_, {8}, 0, 2, 2, 0, 8, 8, 5}),
              HasSubstr(what + ": the plan loads elements [8, 16) of its block dim 0 [2, 4) into "
                               "tensor 0 'A', which do not fit"));
}

}  // namespace
}  // namespace piper::engine::testing
