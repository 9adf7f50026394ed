// Checkpoint files: the safetensors writer and reader (round trips, a file as the reference
// writer lays it out, damaged files), the index's JSON, slices and the CRC-32.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "formats/atomic_file.h"
#include "formats/checkpoint_index.h"
#include "formats/error.h"
#include "formats/safetensors.h"

namespace piper::formats {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed())))
      .string();
}

std::string write_temp(const std::string& name, const std::string& bytes) {
  const std::string path = temp_path(name);
  write_file_synced(path, bytes);
  return path;
}

std::string float_bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

TEST(Safetensors, RoundTripsTensorsAndMetadata) {
  const std::string weights = float_bytes({1, 2, 3, 4, 5, 6});
  const std::string ids(16, '\x07');
  const std::string bytes = safetensors_bytes(
      {{"w", "F32", {2, 3}, weights}, {"a_ids", "I64", {2}, ids}}, {{"rank", "3"}});
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  EXPECT_EQ(length % 8, 0u) << "the header is padded to 8 bytes";
  EXPECT_EQ(bytes.size(), 8 + length + weights.size() + ids.size());
  const std::string path = write_temp("round_trip.safetensors", bytes);
  const SafetensorsFile file(path);
  ASSERT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.tensors().at("w").dtype, "F32");
  EXPECT_THAT(file.tensors().at("w").shape, ElementsAre(2, 3));
  // Laid out in name order.
  EXPECT_EQ(file.tensors().at("a_ids").begin, 0u);
  EXPECT_EQ(file.tensors().at("w").begin, 16u);
  EXPECT_EQ(file.read("w"), weights);
  EXPECT_EQ(file.read("a_ids"), ids);
  EXPECT_EQ(file.metadata().at("rank"), "3");
  EXPECT_THAT([&] { file.read("missing"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("holds no tensor 'missing'")));
  std::filesystem::remove(path);
}

TEST(Safetensors, ReadsTheReferenceLayout) {
  // What safetensors.numpy.save_file({"x": np.array([1.5, -2], np.float32)}) writes.
  std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  bytes += header + float_bytes({1.5f, -2.0f});
  const std::string path = write_temp("reference.safetensors", bytes);
  EXPECT_EQ(SafetensorsFile(path).read("x"), float_bytes({1.5f, -2.0f}));
  std::filesystem::remove(path);
}

TEST(Safetensors, RefusesDamagedFilesNamingThem) {
  const std::string good = safetensors_bytes({{"x", "F32", {2}, float_bytes({1, 2})}});
  std::string long_header = good;
  long_header[0] = '\x7f';
  long_header[1] = '\x7f';
  const std::string truncated = good.substr(0, good.size() - 4);
  for (const auto& [name, bytes] : {std::pair{"header.safetensors", long_header},
                                    {"truncated.safetensors", truncated},
                                    {"short.safetensors", std::string("abc")}}) {
    const std::string path = write_temp(name, bytes);
    EXPECT_THAT([&] { SafetensorsFile file(path); },
                ::testing::ThrowsMessage<Error>(HasSubstr(path)))
        << name;
    std::filesystem::remove(path);
  }
  EXPECT_THAT(
      [] {
        safetensors_bytes({{"x", "F32", {3}, float_bytes({1, 2})}});
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("its shape needs 12")));
  EXPECT_THAT(
      [] {
        safetensors_bytes({{"x", "F32", {}, float_bytes({1})}, {"x", "F32", {}, float_bytes({2})}});
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("repeated")));
}

TEST(CheckpointIndex, RoundTripsThroughJson) {
  CheckpointIndex index;
  index.step = 40;
  index.optimizer_steps = 39;
  index.samples_consumed = 1280;
  index.global_batch = 32;
  index.seed = 7;
  index.data = "data from d";
  index.plan_id = "abc";
  index.model_path = "/models/gpt.onnx";
  TensorSlice box{{0, 4}, {3, 4}, false, 0, 0};
  TensorSlice flat{{}, {}, true, 6, 6};
  index.tensors["w"] = {
      "F32",
      {3, 8},
      {{"rank-00000.safetensors", "w", box, 12u}, {"rank-00001.safetensors", "w", flat, 34u}}};
  const CheckpointIndex back = parse_checkpoint_index(checkpoint_index_json(index), "index.json");
  EXPECT_EQ(back.step, 40);
  EXPECT_EQ(back.optimizer_steps, 39);
  EXPECT_EQ(back.samples_consumed, 1280);
  EXPECT_EQ(back.seed, 7u);
  EXPECT_EQ(back.data, "data from d");
  EXPECT_EQ(back.model_path, "/models/gpt.onnx");
  // An index written before the model was recorded reads as not recording it.
  index.model_path.clear();
  EXPECT_EQ(checkpoint_index_json(index).find("\"model\""), std::string::npos);
  EXPECT_EQ(parse_checkpoint_index(checkpoint_index_json(index), "index.json").model_path, "");
  ASSERT_EQ(back.tensors.at("w").shards.size(), 2u);
  EXPECT_EQ(back.tensors.at("w").shards[0].slice, box);
  EXPECT_EQ(back.tensors.at("w").shards[1].slice, flat);
  EXPECT_EQ(back.tensors.at("w").shards[1].crc32, 34u);
  EXPECT_EQ(box.describe(), "box [0:3, 4:8]");
  EXPECT_EQ(flat.describe(), "flat [6, 12)");
  EXPECT_FALSE(back.tokens);
}

TEST(CheckpointIndex, RecordsTheTokenStream) {
  CheckpointIndex index;
  index.tokens = TokenStream{"/data/train.bin", "uint16", 1000, "idx=0,tgt=1"};
  const std::string json = checkpoint_index_json(index);
  EXPECT_EQ(json.find("\"version\": 2"), std::string::npos);  // an addition, no new version
  const CheckpointIndex back = parse_checkpoint_index(json, "index.json");
  ASSERT_TRUE(back.tokens);
  EXPECT_EQ(back.tokens->file, "/data/train.bin");
  EXPECT_TRUE(back.tokens->same_windows(*index.tokens));
  EXPECT_TRUE(back.tokens->same_windows({"elsewhere.bin", "uint16", 1000, "idx=0,tgt=1"}));
  EXPECT_FALSE(back.tokens->same_windows({"/data/train.bin", "uint16", 999, "idx=0,tgt=1"}));
  EXPECT_FALSE(back.tokens->same_windows({"/data/train.bin", "uint32", 1000, "idx=0,tgt=1"}));
  EXPECT_FALSE(back.tokens->same_windows({"/data/train.bin", "uint16", 1000, "idx=0,tgt=2"}));
  EXPECT_EQ(back.tokens->describe(), "1000 uint16 tokens of '/data/train.bin', idx=0,tgt=1");
}

TEST(CheckpointIndex, RefusesOtherVersionsAndSlicesOutsideTheTensor) {
  CheckpointIndex index;
  index.tensors["w"] = {"F32", {2, 2}, {{"f", "w", TensorSlice{{1, 0}, {2, 2}, false, 0, 0}, 0u}}};
  EXPECT_THAT([&] { parse_checkpoint_index(checkpoint_index_json(index), "i.json"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("tensors/w")));
  index.tensors.clear();
  std::string text = checkpoint_index_json(index);
  text.replace(text.find("\"version\": 1"), 12, "\"version\": 9");
  EXPECT_THAT([&] { parse_checkpoint_index(text, "i.json"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("\"version\" is 9")));
}

// Each element's place in the tensor, in slice order, as the runs give them.
std::vector<int64_t> run_elements(const TensorSlice& slice, const std::vector<int64_t>& shape) {
  std::vector<int64_t> elements;
  for_each_slice_run(slice, shape, 4, [&](uint64_t at, uint64_t from, uint64_t bytes) {
    EXPECT_EQ(from, elements.size() * 4);
    for (uint64_t b = 0; b < bytes; b += 4) elements.push_back(static_cast<int64_t>((at + b) / 4));
  });
  return elements;
}

TEST(TensorSlice, RunsCoverBoxesAndFlatSlicesInOrder) {
  // A [3, 4] tensor: the box rows 1..2, columns 1..2, and flat elements 1..3 of that box.
  const TensorSlice box{{1, 1}, {2, 2}, false, 0, 0};
  EXPECT_THAT(run_elements(box, {3, 4}), ElementsAre(5, 6, 9, 10));
  const TensorSlice flat_in_box{{1, 1}, {2, 2}, true, 1, 3};
  EXPECT_THAT(run_elements(flat_in_box, {3, 4}), ElementsAre(6, 9, 10));
  const TensorSlice flat{{}, {}, true, 3, 6};
  EXPECT_THAT(run_elements(flat, {3, 4}), ElementsAre(3, 4, 5, 6, 7, 8));
  EXPECT_THAT(run_elements(TensorSlice{}, {2, 2}), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(flat_in_box.elements({3, 4}), 3);
  EXPECT_EQ(box.elements({3, 4}), 4);
}

TEST(Crc32, MatchesTheStandardCheckValue) {
  EXPECT_EQ(crc32_of("123456789"), 0xCBF43926u);
  EXPECT_EQ(crc32_of(""), 0u);
}

}  // namespace
}  // namespace piper::formats
