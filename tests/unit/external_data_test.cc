#include "formats/external_data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "formats/error.h"

namespace piper::formats {
namespace {

namespace fs = std::filesystem;

class ExternalDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/piper_external_data_test_" + std::to_string(::getpid());
    fs::remove_all(root_);
    fs::create_directories(folder());
    fs::create_directories(root_ + "/outside");
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string folder() const { return root_ + "/model"; }
  std::string model_path() const { return folder() + "/model.onnx"; }

  void write(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }

  // A model with one float initializer `w` of `elements` elements at `location`.
  onnx::ModelProto model_at(const std::string& location, int elements = 2,
                            const std::string& offset = "", const std::string& length = "") {
    onnx::ModelProto model;
    point(*model.mutable_graph()->add_initializer(), "w", location, elements, offset, length);
    return model;
  }

  static void point(onnx::TensorProto& tensor, const std::string& name, const std::string& location,
                    int elements, const std::string& offset = "", const std::string& length = "") {
    tensor.set_name(name);
    tensor.set_data_type(onnx::TensorProto::FLOAT);
    tensor.add_dims(elements);
    tensor.set_data_location(onnx::TensorProto::EXTERNAL);
    const auto add = [&](const std::string& key, const std::string& value) {
      if (value.empty()) return;
      auto* entry = tensor.add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    };
    add("location", location);
    add("offset", offset);
    add("length", length);
  }

  std::string refusal(const onnx::ModelProto& model) {
    try {
      ExternalData external(model, model_path());
    } catch (const Error& error) {
      return error.what();
    }
    return "";
  }

  std::string root_;
};

TEST_F(ExternalDataTest, FollowsRelativeAndAbsoluteSymlinksThatStayInside) {
  write(folder() + "/real.bin", "01234567");
  fs::create_directories(folder() + "/sub");
  fs::create_symlink("../real.bin", folder() + "/sub/up.bin");
  fs::create_symlink("sub/up.bin", folder() + "/chain.bin");
  fs::create_symlink(fs::canonical(folder()).string() + "/./real.bin", folder() + "/absolute.bin");
  for (const std::string location : {"chain.bin", "absolute.bin", "./sub//up.bin"}) {
    const ExternalData external(model_at(location), model_path());
    ASSERT_EQ(external.files().size(), 1u) << location;
    EXPECT_EQ(external.files()[0].path, fs::canonical(folder() + "/real.bin").string()) << location;
    EXPECT_EQ(external.files()[0].size, 8u);
  }
}

TEST_F(ExternalDataTest, RefusesWhatLeadsOutWhetherOrNotItExists) {
  const std::string outside = fs::canonical(root_ + "/outside").string();
  fs::create_symlink(outside, folder() + "/dir");
  fs::create_symlink("../outside/w.bin", folder() + "/up.bin");
  fs::create_symlink(folder() + "/../outside/w.bin", folder() + "/spelled.bin");
  const std::vector<std::string> locations = {"dir/w.bin",        "up.bin",
                                              "spelled.bin",      "../outside/w.bin",
                                              outside + "/w.bin", std::string("w.bin\0/../x", 11)};
  for (const std::string& location : locations) {
    const std::string missing = refusal(model_at(location));
    write(outside + "/w.bin", "01234567");
    EXPECT_EQ(refusal(model_at(location)), missing) << location;
    EXPECT_NE(missing.find("is outside the model's folder"), std::string::npos) << missing;
    fs::remove(outside + "/w.bin");
  }
}

TEST_F(ExternalDataTest, RefusesASymlinkLoop) {
  fs::create_symlink("b.bin", folder() + "/a.bin");
  fs::create_symlink("a.bin", folder() + "/b.bin");
  EXPECT_NE(refusal(model_at("a.bin")).find("more than 40 symlinks"), std::string::npos);
}

TEST_F(ExternalDataTest, RefusesOffsetsThatAreNotByteCounts) {
  write(folder() + "/w.bin", "01234567");
  for (const std::string offset : {"-1", "1e3", "0x10", "99999999999999999999"}) {
    EXPECT_NE(refusal(model_at("w.bin", 2, offset)).find("offset is '" + offset + "'"),
              std::string::npos)
        << offset;
  }
}

TEST_F(ExternalDataTest, ChecksTensorAttributesToo) {
  onnx::ModelProto model;
  auto* node = model.mutable_graph()->add_node();
  node->set_op_type("Constant");
  node->set_name("/Constant");
  auto* attr = node->add_attribute();
  attr->set_name("value");
  point(*attr->mutable_t(), "", "../secret.bin", 2);
  const std::string message = refusal(model);
  EXPECT_NE(message.find("tensor attribute 'value' of node '/Constant'"), std::string::npos)
      << message;
}

TEST_F(ExternalDataTest, ReadsTheRangeAskedForAndNoMore) {
  write(folder() + "/w.bin", "xx0123456789abcdefyy");
  const onnx::ModelProto model = model_at("w.bin", 4, "2", "16");
  const ExternalData external(model, model_path());
  const onnx::TensorProto& tensor = model.graph().initializer(0);
  std::string got;
  external.read(tensor, 4, 8, [&](const uint8_t* data, size_t size) {
    got.append(reinterpret_cast<const char*>(data), size);
  });
  EXPECT_EQ(got, "456789ab");
  EXPECT_THROW(external.read(tensor, 12, 8, [](const uint8_t*, size_t) {}), Error);

  onnx::ModelProto inlined = model;
  inline_external_data(inlined, external, [](const onnx::TensorProto&) { return true; });
  EXPECT_EQ(inlined.graph().initializer(0).raw_data(), "0123456789abcdef");
  EXPECT_NE(inlined.graph().initializer(0).data_location(), onnx::TensorProto::EXTERNAL);
  EXPECT_EQ(inlined.graph().initializer(0).external_data_size(), 0);
}

TEST_F(ExternalDataTest, ARecordedFileOfAnotherSizeOrTimeIsRefused) {
  write(folder() + "/w.bin", "01234567");
  const onnx::ModelProto model = model_at("w.bin");
  google::protobuf::RepeatedPtrField<plan::ExternalFile> recorded;
  *recorded.Add() = to_plan(ExternalData(model, model_path()).files()[0]);
  EXPECT_NO_THROW(check_unchanged(ExternalData(model, model_path()), recorded, model_path()));
  fs::last_write_time(folder() + "/w.bin",
                      fs::last_write_time(folder() + "/w.bin") + std::chrono::seconds(5));
  EXPECT_THROW(check_unchanged(ExternalData(model, model_path()), recorded, model_path()), Error);
  recorded[0] = to_plan(ExternalData(model, model_path()).files()[0]);
  write(folder() + "/w.bin", "0123456789");
  EXPECT_THROW(check_unchanged(ExternalData(model, model_path()), recorded, model_path()), Error);
}

}  // namespace
}  // namespace piper::formats
