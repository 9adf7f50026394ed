// Batch sources: .npy directories (row wrap-around, checks against the plan, only this rank's
// rows), token files (seeded windows, checks naming the flags) and deterministic synthetic data.
#include "engine/runtime/data.h"

#include <gmock/gmock.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "engine/runtime/label_count.h"
#include "engine/runtime/token_data.h"
#include "engine_test_util.h"
#include "formats/error.h"
#include "formats/npy.h"

namespace piper::engine::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A plan with inputs x [G, 2] float32 and y [G] int64 (int_high 10), G = 2, fed as two
// microbatches of one sample each.
plan::Plan TwoInputPlan() {
  PlanBuilder b;
  const int x0 = b.Tensor("x0", {1, 2}, plan::FLOAT32, plan::INPUT);
  const int x1 = b.Tensor("x1", {1, 2}, plan::FLOAT32, plan::INPUT);
  const int y0 = b.Tensor("y0", {1}, plan::INT64, plan::INPUT);
  const int y1 = b.Tensor("y1", {1}, plan::INT64, plan::INPUT);
  b.Input("x", x0, 0, 1);
  b.Input("x", x1, 1, 1);
  b.Input("y", y0, 0, 1, 10);
  b.Input("y", y1, 1, 1, 10);
  b.plan().set_global_batch(2);
  return b.Build();
}

class DataDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/piper_data_test_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  template <typename T>
  void Write(const std::string& name, formats::NpyDType dtype, std::vector<int64_t> shape,
             const std::vector<T>& values) {
    formats::NpyArray array;
    array.dtype = dtype;
    array.shape = std::move(shape);
    array.data.resize(values.size() * sizeof(T));
    std::memcpy(array.data.data(), values.data(), array.data.size());
    formats::write_npy(dir_ + "/" + name + ".npy", array);
  }
  void WriteGood() {
    Write<float>("x", formats::NpyDType::kFloat32, {5, 2}, {0, 0, 1, 1, 2, 2, 3, 3, 4, 4});
    Write<int64_t>("y", formats::NpyDType::kInt64, {5}, {0, 1, 2, 3, 4});
  }
  std::string SourceError() {
    try {
      make_npy_source(TwoInputPlan(), dir_);
    } catch (const piper::Error& error) {
      return error.what();
    }
    ADD_FAILURE() << "expected an error";
    return "";
  }

  std::string dir_;
};

std::vector<float> Floats(const HostTensor& tensor) {
  const float* data = reinterpret_cast<const float*>(tensor.data.data());
  return {data, data + tensor.data.size() / 4};
}
std::vector<int64_t> Int64s(const HostTensor& tensor) {
  const int64_t* data = reinterpret_cast<const int64_t*>(tensor.data.data());
  return {data, data + tensor.data.size() / 8};
}

TEST_F(DataDir, StepsWalkRowsModuloSamples) {
  WriteGood();
  auto source = make_npy_source(TwoInputPlan(), dir_);
  const Batch step0 = source->batch(0);
  EXPECT_THAT(step0.at("x").shape, ElementsAre(2, 2));
  EXPECT_THAT(Floats(step0.at("x")), ElementsAre(0, 0, 1, 1));
  EXPECT_THAT(Int64s(step0.at("y")), ElementsAre(0, 1));
  EXPECT_THAT(Int64s(source->batch(2).at("y")), ElementsAre(4, 0));
  EXPECT_THAT(Int64s(source->batch(3).at("y")), ElementsAre(1, 2));
  EXPECT_THAT(Floats(source->batch(7).at("x")), ElementsAre(4, 4, 0, 0));
}

TEST_F(DataDir, MissingFileIsNamed) {
  Write<float>("x", formats::NpyDType::kFloat32, {5, 2}, std::vector<float>(10));
  EXPECT_THAT(SourceError(),
              HasSubstr("y.npy' is missing; the plan's input 'y' needs it (int64, shape "
                        "[samples])"));
}

TEST_F(DataDir, DtypeMismatchIsNamed) {
  WriteGood();
  Write<float>("y", formats::NpyDType::kFloat32, {5}, std::vector<float>(5));
  EXPECT_THAT(SourceError(), HasSubstr("y.npy' holds float32 but the plan's input 'y' is int64"));
}

TEST_F(DataDir, TrailingDimensionMismatchIsNamed) {
  WriteGood();
  Write<float>("x", formats::NpyDType::kFloat32, {5, 3}, std::vector<float>(15));
  EXPECT_THAT(
      SourceError(),
      HasSubstr("x.npy' has shape [5, 3] but the plan's input 'x' needs shape [samples, 2]"));
}

TEST_F(DataDir, SampleCountsMustAgree) {
  WriteGood();
  Write<int64_t>("y", formats::NpyDType::kInt64, {4}, {0, 1, 2, 3});
  EXPECT_THAT(SourceError(), HasSubstr("y.npy' holds 4 samples but '"));
  EXPECT_THAT(SourceError(), HasSubstr("x.npy' holds 5; the files of --data pair up row by row"));
}

TEST_F(DataDir, NotADirectory) {
  try {
    make_npy_source(TwoInputPlan(), dir_ + "/nope");
    FAIL() << "expected an error";
  } catch (const piper::Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("is not a directory"));
  }
}

// The second of two ranks that split y [G = 4] into halves: it feeds rows 2 and 3 alone.
plan::Plan SecondHalfPlan() {
  PlanBuilder b;
  b.Input("y", b.Tensor("y", {2}, plan::INT64, plan::INPUT), 2, 2, 10);
  b.plan().set_global_batch(4);
  return b.Build();
}

TEST_F(DataDir, ReadsOnlyTheRowsTheRankFeeds) {
  Write<int64_t>("y", formats::NpyDType::kInt64, {5}, {10, 11, 12, 13, 14});
  auto source = make_npy_source(SecondHalfPlan(), dir_);
  EXPECT_THAT(Int64s(source->batch(0).at("y")), ElementsAre(0, 0, 12, 13));
  EXPECT_THAT(Int64s(source->batch(1).at("y")), ElementsAre(0, 0, 11, 12));  // rows 6, 7 mod 5
}

std::string ErrorOf(const std::function<void()>& run) {
  try {
    run();
  } catch (const piper::Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

// idx and tgt [G = 3, T = 4] int64 (vocabulary 50).
plan::Plan WindowPlan(int world_size = 1) {
  PlanBuilder b;
  b.Input("idx", b.Tensor("idx", {3, 4}, plan::INT64, plan::INPUT), 0, 3, 50);
  b.Input("tgt", b.Tensor("tgt", {3, 4}, plan::INT64, plan::INPUT), 0, 3, 50);
  b.plan().set_global_batch(3);
  b.plan().mutable_header()->set_world_size(world_size);
  return b.Build();
}

class TokenFile : public DataDir {
 protected:
  template <typename T>
  std::string WriteTokens(const std::vector<T>& tokens, const std::string& name = "tokens.bin") {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()),
               static_cast<std::streamsize>(tokens.size() * sizeof(T)));
    return path;
  }
  TokenOptions Options(const std::string& path, const std::string& inputs = "idx=0,tgt=1",
                       TokenDType dtype = TokenDType::kUint16) {
    return {path, dtype, parse_token_inputs(inputs)};
  }
};

TEST_F(TokenFile, WindowsStartAtSeededPositions) {
  std::vector<uint16_t> tokens(100);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 50);
  const TokenOptions options = Options(WriteTokens(tokens));
  auto source = make_token_source(WindowPlan(), options, 7);
  for (int64_t step : {0, 5}) {
    const Batch batch = source->batch(step);
    const auto idx = Int64s(batch.at("idx")), tgt = Int64s(batch.at("tgt"));
    for (int64_t row = 0; row < 3; ++row) {
      // A window spans offset 1 + length 4 tokens: positions 0 .. 95.
      const int64_t start = token_window_start(7, step * 3 + row, 100, 5);
      ASSERT_GE(start, 0);
      ASSERT_LE(start, 95);
      for (int64_t t = 0; t < 4; ++t) {
        EXPECT_EQ(idx[row * 4 + t], (start + t) % 50);
        EXPECT_EQ(tgt[row * 4 + t], (start + t + 1) % 50);
      }
    }
  }
  EXPECT_NE(Int64s(source->batch(0).at("idx")), Int64s(source->batch(1).at("idx")));
  EXPECT_NE(Int64s(source->batch(0).at("idx")),
            Int64s(make_token_source(WindowPlan(), options, 8)->batch(0).at("idx")));
}

TEST_F(TokenFile, WindowStartIsSplitMix64OfSeedAndSample) {
  // docs/user-guide.md spells the draw out so that other tools reproduce the windows (as
  // tests/integration/test_tokens.py does in Python); this is that text, step by step.
  uint64_t z = 3 ^ (11 * 0xd1b54a32d192ed03ull);
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  EXPECT_EQ(token_window_start(3, 11, 1000, 17), static_cast<int64_t>(z % 984));
}

TEST_F(TokenFile, Uint32IdsAndTheRowsOfOneRank) {
  PlanBuilder b;
  b.Input("ids", b.Tensor("ids", {1, 3}, plan::INT64, plan::INPUT), 1, 1, 0);
  b.plan().set_global_batch(2);
  std::vector<uint32_t> tokens = {70000, 70001, 70002, 70003};
  const Batch batch =
      make_token_source(b.Build(), Options(WriteTokens(tokens), "ids=0", TokenDType::kUint32), 0)
          ->batch(0);
  const auto ids = Int64s(batch.at("ids"));
  EXPECT_THAT(std::vector<int64_t>(ids.begin(), ids.begin() + 3), ElementsAre(0, 0, 0));
  const int64_t start = token_window_start(0, 1, 4, 3);
  EXPECT_THAT(std::vector<int64_t>(ids.begin() + 3, ids.end()),
              ElementsAre(70000 + start, 70001 + start, 70002 + start));
}

TEST_F(TokenFile, ErrorsNameTheFlagAndValue) {
  const std::string path = WriteTokens(std::vector<uint16_t>(20, 1));
  EXPECT_THAT(ErrorOf([&] { make_token_source(WindowPlan(), Options(path, "idx=0,tgt=17"), 0); }),
              HasSubstr("holds 20 tokens, fewer than one window of --token-inputs "
                        "idx=0,tgt=17 needs (21 tokens"));
  EXPECT_THAT(ErrorOf([&] { make_token_source(WindowPlan(), Options(path, "idx=0,label=1"), 0); }),
              HasSubstr("--token-inputs idx=0,label=1: the plan has no input 'label'; its "
                        "inputs are idx, tgt"));
  // Another rank may read it.
  EXPECT_NO_THROW(make_token_source(WindowPlan(2), Options(path, "idx=0,tgt=1,label=1"), 0));
  EXPECT_THAT(ErrorOf([&] { parse_token_inputs("idx=0,idx=1"); }),
              HasSubstr("--token-inputs idx=0,idx=1: input 'idx' is named twice"));
  EXPECT_THAT(ErrorOf([&] { parse_token_inputs("idx=-1"); }),
              HasSubstr("--token-inputs idx=-1: 'idx=-1' is not NAME=OFFSET"));
  EXPECT_THAT(ErrorOf([&] { parse_token_inputs("idx"); }), HasSubstr("'idx' is not NAME=OFFSET"));
  EXPECT_THAT(ErrorOf([&] { parse_token_dtype("int8"); }), HasSubstr("--token-dtype int8"));
  const std::string odd = WriteTokens(std::vector<uint8_t>(21, 1), "odd.bin");
  EXPECT_THAT(ErrorOf([&] { make_token_source(WindowPlan(), Options(odd), 0); }),
              HasSubstr("odd.bin' is 21 bytes, not a multiple of 2 (--token-dtype uint16)"));
  EXPECT_THAT(ErrorOf([&] { make_token_source(WindowPlan(), Options(dir_ + "/none.bin"), 0); }),
              HasSubstr("--tokens: cannot read '"));
  const std::string wide = WriteTokens(std::vector<uint16_t>(20, 50), "wide.bin");
  EXPECT_THAT(ErrorOf([&] { make_token_source(WindowPlan(), Options(wide), 0)->batch(0); }),
              HasSubstr("is id 50, but the model's input 'idx' takes ids below 50"));
  PlanBuilder floats;
  floats.Input("x", floats.Tensor("x", {3, 4}, plan::FLOAT32, plan::INPUT), 0, 3);
  floats.plan().set_global_batch(3);
  EXPECT_THAT(ErrorOf([&] { make_token_source(floats.Build(), Options(path, "x=0"), 0); }),
              HasSubstr("--token-inputs x=0: the plan's input 'x' is float32 [samples, 4]"));
}

TEST_F(TokenFile, DataFeedsTheOtherInputsButNotTheSameOne) {
  const std::string path = WriteTokens(std::vector<uint16_t>(20, 1));
  const TokenOptions only_idx = Options(path, "idx=0");
  EXPECT_THAT(ErrorOf([&] {
                make_batch_source(WindowPlan(), {std::nullopt, &only_idx, 0});
              }),
              HasSubstr("the plan also reads 'tgt'; add it to --token-inputs, or give its "
                        "NAME.npy with --data DIR"));
  Write<int64_t>("tgt", formats::NpyDType::kInt64, {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  const Batch batch = make_batch_source(WindowPlan(), {dir_, &only_idx, 0})->batch(0);
  EXPECT_THAT(Int64s(batch.at("idx")), ::testing::Each(1));
  EXPECT_THAT(Int64s(batch.at("tgt")), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4));
  const TokenOptions both = Options(path);
  EXPECT_THAT(ErrorOf([&] {
                make_batch_source(WindowPlan(), {dir_, &both, 0});
              }),
              HasSubstr("--tokens and --data both feed the plan's input 'tgt'"));
}

TEST(SyntheticData, DeterministicPerSeedAndStep) {
  const plan::Plan plan = TwoInputPlan();
  auto a = make_synthetic_source(plan, 7);
  auto b = make_synthetic_source(plan, 7);
  auto c = make_synthetic_source(plan, 8);
  EXPECT_EQ(a->batch(3).at("x").data, b->batch(3).at("x").data);
  EXPECT_EQ(a->batch(3).at("y").data, b->batch(3).at("y").data);
  EXPECT_NE(a->batch(3).at("x").data, a->batch(4).at("x").data);
  EXPECT_NE(a->batch(3).at("x").data, c->batch(3).at("x").data);
}

TEST(SyntheticData, NormalFloatsAndBoundedInts) {
  PlanBuilder b;
  const int x = b.Tensor("x", {4096, 4}, plan::FLOAT32, plan::INPUT);
  const int y = b.Tensor("y", {4096}, plan::INT64, plan::INPUT);
  const int z = b.Tensor("z", {4096}, plan::INT64, plan::INPUT);
  b.Input("x", x, 0, 4096);
  b.Input("y", y, 0, 4096, 10);
  b.Input("z", z, 0, 4096, 0);
  b.plan().set_global_batch(4096);
  const Batch batch = make_synthetic_source(b.Build(), 0)->batch(0);
  const auto xs = Floats(batch.at("x"));
  double mean = 0, square = 0;
  for (float v : xs) {
    mean += v;
    square += double{v} * v;
  }
  mean /= xs.size();
  const double variance = square / xs.size() - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(variance, 1.0, 0.05);
  std::vector<int> counts(10, 0);
  for (int64_t v : Int64s(batch.at("y"))) {
    ASSERT_GE(v, 0);
    ASSERT_LT(v, 10);
    ++counts[v];
  }
  for (int count : counts) EXPECT_GT(count, 300);
  for (int64_t v : Int64s(batch.at("z"))) ASSERT_EQ(v, 0);
}

// A model may take a bool input (a mask): --data feeds numpy's bool arrays,
// and synthetic data draws true and false alike.
plan::Plan MaskPlan() {
  PlanBuilder b;
  const int m = b.Tensor("m", {4096, 2}, plan::BOOL, plan::INPUT);
  b.Input("m", m, 0, 4096);
  b.plan().set_global_batch(4096);
  return b.Build();
}

TEST_F(DataDir, FeedsBoolArrays) {
  Write<uint8_t>("m", formats::NpyDType::kBool, {3, 2}, {1, 0, 0, 1, 1, 1});
  const Batch batch = make_npy_source(MaskPlan(), dir_)->batch(0);
  EXPECT_EQ(batch.at("m").dtype, plan::BOOL);
  EXPECT_THAT(std::vector<uint8_t>(batch.at("m").data.begin(), batch.at("m").data.begin() + 8),
              ElementsAre(1, 0, 0, 1, 1, 1, 1, 0));
}

TEST(SyntheticData, FairBools) {
  const Batch batch = make_synthetic_source(MaskPlan(), 0)->batch(0);
  int64_t trues = 0;
  for (uint8_t v : batch.at("m").data) {
    ASSERT_LE(v, 1);
    trues += v;
  }
  EXPECT_NEAR(trues / 8192.0, 0.5, 0.05);
}

// A rank that counts the labels y [G, 3] (ignore_index -1) of a step without feeding any of
// their rows, G = 2.
plan::Plan LabelCountPlan() {
  PlanBuilder b;
  plan::LabelCount& count = *b.plan().add_label_counts();
  count.set_tensor(b.Tensor("count", {}, plan::FLOAT32, plan::INPUT));
  count.set_input("y");
  count.add_sample_shape(3);
  count.set_int_high(2);
  count.set_ignore_index(-1);
  b.plan().set_global_batch(2);
  return b.Build();
}

TEST_F(DataDir, CountsTheLabelsOfTheWholeStep) {
  Write<int64_t>("y", formats::NpyDType::kInt64, {3, 3}, {-1, 4, -1, 0, 0, 0, -1, -1, -1});
  const plan::Plan plan = LabelCountPlan();
  auto source = make_npy_source(plan, dir_);
  EXPECT_EQ(count_labels(plan.label_counts(0), source->batch(0)), 4.0f);  // rows 0, 1
  EXPECT_EQ(count_labels(plan.label_counts(0), source->batch(1)), 1.0f);  // rows 2, 0
  plan::LabelCount shifted = plan.label_counts(0);                        // labels[:, 1:]
  plan::CountWindow& window = *shifted.add_window();
  window.set_start(1);
  window.set_step(1);
  window.set_count(2);
  EXPECT_EQ(count_labels(shifted, source->batch(0)), 3.0f);
  window.set_count(3);
  EXPECT_THROW(count_labels(shifted, source->batch(0)), piper::Error);
  Write<int64_t>("y", formats::NpyDType::kInt64, {3, 2}, std::vector<int64_t>(6));
  try {
    make_npy_source(plan, dir_);
    ADD_FAILURE() << "expected an error";
  } catch (const piper::Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("needs shape [samples, 3]"));
  }
}

TEST(SyntheticData, LabelCountsSeeTheRowsOtherRanksFeed) {
  // The same values as a rank that feeds y, since synthetic data depends on the name alone.
  const Batch counted = make_synthetic_source(LabelCountPlan(), 5)->batch(3);
  PlanBuilder b;
  b.Input("y", b.Tensor("y", {2, 3}, plan::INT64, plan::INPUT), 0, 2, 2);
  b.plan().set_global_batch(2);
  const Batch fed = make_synthetic_source(b.Build(), 5)->batch(3);
  EXPECT_EQ(Int64s(counted.at("y")), Int64s(fed.at("y")));
  int64_t labelled = 0;
  for (int64_t label : Int64s(fed.at("y"))) labelled += label != -1;
  EXPECT_EQ(count_labels(LabelCountPlan().label_counts(0), counted), static_cast<float>(labelled));
  EXPECT_THAT(
      [&] {
        try {
          count_labels(LabelCountPlan().label_counts(0), Batch{});
        } catch (const piper::Error& error) {
          return std::string(error.what());
        }
        return std::string();
      }(),
      HasSubstr("counts the labelled entries of batch input 'y'"));
}

}  // namespace
}  // namespace piper::engine::testing
