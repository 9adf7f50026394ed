// .npy reading and writing: round trips, files as numpy writes them, and errors.
#include "formats/npy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "formats/error.h"

namespace piper::formats {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename T>
NpyArray Make(NpyDType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  NpyArray array;
  array.dtype = dtype;
  array.shape = std::move(shape);
  array.data.resize(values.size() * sizeof(T));
  // Empty vectors may hold null pointers, which memcpy must not get even for 0 bytes (UBSan).
  if (!values.empty()) std::memcpy(array.data.data(), values.data(), array.data.size());
  return array;
}

// The bytes numpy.save writes: magic, version, header length, padded dict, data.
std::string NumpyBytes(const std::string& dict, const std::string& data, int major = 1) {
  std::string header = dict;
  const size_t preamble = major == 1 ? 10 : 12;
  while ((preamble + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (size_t i = 0; i < (major == 1 ? 2u : 4u); ++i) {
    out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  }
  return out + header + data;
}

std::string ExpectParseError(const std::string& bytes) {
  try {
    parse_npy(bytes, "data/x.npy");
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

TEST(Npy, RoundTripsFloatAndIntArrays) {
  const std::vector<NpyArray> arrays = {
      Make<float>(NpyDType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6}),
      Make<int64_t>(NpyDType::kInt64, {4}, {-1, 0, 7, int64_t{1} << 40}),
      Make<float>(NpyDType::kFloat32, {}, {3.5f}),
      Make<float>(NpyDType::kFloat32, {2, 0, 3}, {}),
      Make<int64_t>(NpyDType::kInt64, {1, 2, 1}, {5, 6}),
      Make<uint8_t>(NpyDType::kBool, {2, 3}, {1, 0, 0, 1, 1, 0}),
  };
  for (const NpyArray& array : arrays) {
    const std::string bytes = serialize_npy(array);
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    const size_t header = static_cast<unsigned char>(bytes[8]) | (bytes[9] << 8);
    EXPECT_EQ((10 + header) % 64, 0u);
    const NpyArray back = parse_npy(bytes, "round trip");
    EXPECT_EQ(back.dtype, array.dtype);
    EXPECT_EQ(back.shape, array.shape);
    EXPECT_EQ(back.data, array.data);
  }
}

TEST(Npy, WritesAndReadsFiles) {
  const std::string path = ::testing::TempDir() + "/piper_npy_test.npy";
  write_npy(path, Make<float>(NpyDType::kFloat32, {3}, {1, 2, 3}));
  const NpyArray back = read_npy(path);
  EXPECT_EQ(back.shape, std::vector<int64_t>{3});
  EXPECT_EQ(back.elements(), 3);
  std::filesystem::remove(path);
}

TEST(Npy, ReadsNumpyHeaders) {
  const float values[2] = {1.5f, -2.0f};
  const std::string data(reinterpret_cast<const char*>(values), sizeof values);
  const NpyArray v1 = parse_npy(
      NumpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data), "a.npy");
  EXPECT_THAT(v1.shape, ElementsAre(2));
  const NpyArray v2 = parse_npy(
      NumpyBytes("{'shape': (1, 2), 'fortran_order': False, 'descr': '<f4'}", data, 2), "b.npy");
  EXPECT_THAT(v2.shape, ElementsAre(1, 2));
  EXPECT_EQ(v2.data, v1.data);
  // Fortran order does not matter for one dimension.
  EXPECT_NO_THROW(parse_npy(
      NumpyBytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", data), "c.npy"));
}

TEST(Npy, ReadsNumpyBoolArrays) {
  // numpy.save(path, mask) for a bool mask: one byte per element, 0 or 1.
  const NpyArray mask =
      parse_npy(NumpyBytes("{'descr': '|b1', 'fortran_order': False, 'shape': (2, 2), }",
                           std::string("\x01\x00\x00\x01", 4)),
                "mask.npy");
  EXPECT_EQ(mask.dtype, NpyDType::kBool);
  EXPECT_THAT(mask.shape, ElementsAre(2, 2));
  EXPECT_THAT(mask.data, ElementsAre(1, 0, 0, 1));
}

TEST(Npy, ErrorsNameTheFileAndTheProblem) {
  EXPECT_THAT(ExpectParseError("PK\x03\x04 a zip file"),
              HasSubstr("'data/x.npy' is not a .npy file"));
  EXPECT_THAT(
      ExpectParseError(NumpyBytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
                                  std::string(16, 0))),
      HasSubstr("Fortran order"));
  EXPECT_THAT(ExpectParseError(NumpyBytes(
                  "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", std::string(16, 0))),
              HasSubstr("has dtype '<f8'"));
  EXPECT_THAT(ExpectParseError(NumpyBytes(
                  "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", std::string(16, 0))),
              HasSubstr("truncated: shape needs 24 bytes of data, the file has 16"));
  const std::string whole =
      NumpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", std::string(8, 0));
  EXPECT_THAT(ExpectParseError(whole.substr(0, 30)), HasSubstr("truncated"));
  EXPECT_THAT(ExpectParseError(NumpyBytes("{'descr': '<f4', 'shape': (2,), }", std::string(8, 0))),
              HasSubstr("malformed .npy header"));
}

// Found by fuzz_npy: a dimension past int64 overflowed while it was read, and a shape whose
// size overflows wrapped around to a small one, so (2**62, 8) int64 read as 0 bytes.
TEST(Npy, HugeShapesAreErrorsNotOverflows) {
  EXPECT_THAT(
      ExpectParseError(NumpyBytes(
          "{'descr': '|b1', 'fortran_order': False, 'shape': (55555555555555555555,), }", "")),
      HasSubstr("a dimension past int64"));
  EXPECT_THAT(
      ExpectParseError(NumpyBytes(
          "{'descr': '<i8', 'fortran_order': False, 'shape': (4611686018427387904, 8), }", "")),
      HasSubstr("a shape whose size overflows 64 bits"));
  // Past int64 but within uint64 before a zero dimension: it once passed, and counting the
  // elements overflowed (fuzz_npy).
  EXPECT_THAT(
      ExpectParseError(NumpyBytes(
          "{'descr': '|b1', 'fortran_order': False, 'shape': (4294967296, 3000000000, 0), }", "")),
      HasSubstr("a shape whose size overflows 64 bits"));
  // Below the limit an empty array still reads.
  const NpyArray empty = parse_npy(
      NumpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 0), }", ""), "e");
  EXPECT_EQ(empty.elements(), 0);
  EXPECT_TRUE(empty.data.empty());
}

TEST(Npy, MissingFileNamesThePath) {
  try {
    read_npy("/nonexistent/dir/x.npy");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("/nonexistent/dir/x.npy"));
  }
}

TEST(Npy, SerializeRejectsDataShapeMismatch) {
  EXPECT_THROW(serialize_npy(Make<float>(NpyDType::kFloat32, {3}, {1, 2})), Error);
}

}  // namespace
}  // namespace piper::formats
