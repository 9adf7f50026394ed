// Batch sources: .npy directories (row wrap-around, checks against the plan) and
// deterministic synthetic data.
#include "engine/runtime/data.h"

#include <gmock/gmock.h>

#include <filesystem>

#include "engine/runtime/label_count.h"
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
