#include "formats/npy.h"

#include <cctype>

#include "formats/atomic_file.h"
#include "formats/error.h"

namespace piper::formats {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

uint64_t read_le(std::string_view bytes, size_t at, size_t width) {
  uint64_t value = 0;
  for (size_t i = 0; i < width; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return value;
}

// A tiny reader for the Python dict literal of an .npy header, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  void parse(std::string& descr, bool& fortran_order, std::vector<int64_t>& shape) {
    bool has_descr = false, has_order = false, has_shape = false;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = quoted();
      expect(':');
      skip_space();
      if (key == "descr") {
        descr = quoted();
        has_descr = true;
      } else if (key == "fortran_order") {
        fortran_order = boolean();
        has_order = true;
      } else if (key == "shape") {
        shape = tuple();
        has_shape = true;
      } else {
        fail("unknown header key '" + key + "'");
      }
      skip_space();
      if (peek() == ',') ++at_;
    }
    if (!has_descr || !has_order || !has_shape) {
      fail("the header lacks one of 'descr', 'fortran_order', 'shape'");
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw Error("'" + source_ + "' has a malformed .npy header (" + why +
                "): " + std::string(text_));
  }
  char peek() const { return at_ < text_.size() ? text_[at_] : '\0'; }
  void skip_space() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++at_;
  }
  std::string quoted() {
    skip_space();
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a quoted string");
    const size_t end = text_.find(quote, at_ + 1);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string value(text_.substr(at_ + 1, end - at_ - 1));
    at_ = end + 1;
    return value;
  }
  bool boolean() {
    if (text_.substr(at_, 4) == "True") {
      at_ += 4;
      return true;
    }
    if (text_.substr(at_, 5) == "False") {
      at_ += 5;
      return false;
    }
    fail("fortran_order is neither True nor False");
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> values;
    while (true) {
      skip_space();
      if (peek() == ')') {
        ++at_;
        return values;
      }
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("bad shape");
      int64_t value = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (__builtin_mul_overflow(value, 10, &value) ||
            __builtin_add_overflow(value, text_[at_++] - '0', &value)) {
          fail("a dimension past int64");
        }
      }
      values.push_back(value);
      skip_space();
      if (peek() == ',') ++at_;
    }
  }

  std::string_view text_;
  const std::string& source_;
  size_t at_ = 0;
};

// The bytes of data `array`'s shape and dtype need; the shape comes from a file, so the
// product is checked (a shape of (2**62, 8) once wrapped around to a small size). A zero
// dimension does not excuse the others: their product must fit too, as elements() takes it
// in order.
uint64_t data_bytes(const NpyArray& array, const std::string& source) {
  auto bytes = static_cast<int64_t>(npy_dtype_size(array.dtype));
  bool empty = false;
  for (int64_t dim : array.shape) {
    if (dim == 0) {
      empty = true;
    } else if (__builtin_mul_overflow(bytes, dim, &bytes)) {
      throw Error("'" + source +
                  "' has a shape whose size overflows 64 bits; it cannot be an array");
    }
  }
  return empty ? 0 : static_cast<uint64_t>(bytes);
}

}  // namespace

int64_t NpyArray::elements() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

std::string npy_descr(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kFloat32:
      return "<f4";
    case NpyDType::kInt64:
      return "<i8";
    case NpyDType::kBool:
      return "|b1";
  }
  throw Error("unknown .npy dtype");
}

size_t npy_dtype_size(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kFloat32:
      return 4;
    case NpyDType::kInt64:
      return 8;
    case NpyDType::kBool:
      return 1;
  }
  throw Error("unknown .npy dtype");
}

NpyHeader parse_npy_header(std::string_view bytes, const std::string& source) {
  if (bytes.substr(0, kMagic.size()) != kMagic) {
    throw Error("'" + source + "' is not a .npy file (bad magic); save arrays with numpy.save");
  }
  if (bytes.size() < 10) {
    throw Error("'" + source + "' is truncated: " + std::to_string(bytes.size()) +
                " bytes, shorter than a .npy preamble");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  if (major < 1 || major > 3) {
    throw Error("'" + source + "' has .npy format version " + std::to_string(major) +
                ".x; piper reads versions 1.0 to 3.0");
  }
  const size_t width = major == 1 ? 2 : 4;
  const size_t preamble = 8 + width;
  if (bytes.size() < preamble) {
    throw Error("'" + source + "' is truncated inside its .npy preamble");
  }
  const uint64_t header_length = read_le(bytes, 8, width);
  if (bytes.size() < preamble + header_length) {
    throw Error("'" + source + "' is truncated: its .npy header needs " +
                std::to_string(header_length) + " bytes, the file has " +
                std::to_string(bytes.size() - preamble));
  }
  std::string descr;
  bool fortran_order = false;
  NpyArray array;  // its shape and dtype; data_bytes needs them together
  HeaderParser(bytes.substr(preamble, header_length), source)
      .parse(descr, fortran_order, array.shape);
  if (descr == "<f4") {
    array.dtype = NpyDType::kFloat32;
  } else if (descr == "<i8") {
    array.dtype = NpyDType::kInt64;
  } else if (descr == "|b1") {
    array.dtype = NpyDType::kBool;
  } else {
    throw Error("'" + source + "' has dtype '" + descr +
                "'; piper reads float32 ('<f4'), int64 ('<i8') and bool ('|b1') arrays, "
                "convert it with array.astype(numpy.float32) or array.astype(numpy.int64)");
  }
  if (fortran_order && array.shape.size() > 1) {
    throw Error("'" + source +
                "' stores its array in Fortran order; save a C-order copy with "
                "numpy.save(path, numpy.ascontiguousarray(array))");
  }
  const uint64_t expected = data_bytes(array, source);
  const size_t available = bytes.size() - preamble - header_length;
  if (available < expected) {
    throw Error("'" + source + "' is truncated: shape needs " + std::to_string(expected) +
                " bytes of data, the file has " + std::to_string(available));
  }
  return NpyHeader{array.dtype, std::move(array.shape), preamble + header_length,
                   static_cast<size_t>(expected)};
}

NpyArray parse_npy(std::string_view bytes, const std::string& source) {
  NpyHeader header = parse_npy_header(bytes, source);
  NpyArray array;
  array.dtype = header.dtype;
  array.shape = std::move(header.shape);
  const std::string_view data = bytes.substr(header.data_offset, header.data_bytes);
  array.data.assign(data.begin(), data.end());
  return array;
}

NpyArray read_npy(const std::string& path) { return parse_npy(read_file(path), path); }

MappedNpy::MappedNpy(const std::string& path)
    : file(path), header(parse_npy_header(file.bytes(), path)) {}

std::string serialize_npy(const NpyArray& array) {
  const size_t expected = static_cast<size_t>(array.elements()) * npy_dtype_size(array.dtype);
  if (array.data.size() != expected) {
    throw Error("cannot write .npy: shape needs " + std::to_string(expected) +
                " bytes of data, the array holds " + std::to_string(array.data.size()));
  }
  std::string shape = "(";
  for (size_t i = 0; i < array.shape.size(); ++i) {
    shape += (i ? ", " : "") + std::to_string(array.shape[i]);
  }
  shape += array.shape.size() == 1 ? ",)" : ")";
  std::string header = "{'descr': '" + npy_descr(array.dtype) +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  const bool v2 = header.size() + 1 + 10 > 65535;
  const size_t preamble = v2 ? 12 : 10;
  const size_t padded = (preamble + header.size() + 1 + 63) / 64 * 64;
  header.append(padded - preamble - header.size() - 1, ' ');
  header += '\n';
  std::string out(kMagic);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  const size_t length = header.size();
  for (size_t i = 0; i < (v2 ? 4u : 2u); ++i) out += static_cast<char>((length >> (8 * i)) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char*>(array.data.data()), array.data.size());
  return out;
}

void write_npy(const std::string& path, const NpyArray& array) {
  write_file_atomically(path, serialize_npy(array));
}

}  // namespace piper::formats
