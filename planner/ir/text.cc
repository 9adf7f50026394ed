// The IR's text form. One item per line, in this order when printed:
//
//   tensor NAME DTYPE[DIMS] ROLE [init=NAME] [high=INT] [accumulated=1]
//          [shard_of=NAME] [placement=S(DIM) | placement=P] [over=replicas]
//          [replica_inits=[NAME, ...]] [dynamic=[(DIM, NAME, SCALE), ...]] [counts=(NAME, IGNORE[,
//          [(START, STEP, COUNT), ...]])] [data=0xHEX | data=[NUMBERS]]
//   op INDEX TYPE "NAME" (IN, ...) -> (OUT, ...) [{KEY=VALUE, ...}] [pass=PASS] [tags={K:V, ...}]
//   inputs NAME ...
//   loss NAME [seed=NAME]
//   trained NAME [grad=NAME] [state=[NAME, ...]]
//   grad_norm NAME
//   shard_groups [INT, ...] ...
//   task INDEX KIND PASS [mb=INT] [tags={...}] [devices=[INT, ...]] [stream=NAME]
//        [ops=[INT, ...]] [tensors=[NAME, ...]] [peer=INT] [replica=INT] [average=1]
//        [background=1]
//   edge FROM -> TO [data | temporal | window]
//
// Names are bare words ([A-Za-z0-9_./]) or C-style quoted strings; `_` in an
// op's inputs or outputs marks an omitted tensor. Attribute values are an
// integer (1), a float (1.0, 1e-05, inf), a string ("x"), or a list of either
// ([1,0], [0.5,2.0], [] for no integers, floats[] for no floats). Optional
// fields take the defaults of the structs in op_graph.h and task_graph.h.
// `#` starts a comment. Names must be declared before use; task and edge
// indices are not checked here, so tests can write graphs verify() rejects.
#include "planner/ir/text.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <system_error>

namespace piper::ir {
namespace {

// ---------------------------------------------------------------- printing

constexpr char kHexDigits[] = "0123456789abcdef";

bool is_bare_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '/';
}

std::string quote(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      quoted += {'\\', c};
    } else if (c == '\n') {
      quoted += "\\n";
    } else if (c == '\t') {
      quoted += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      quoted += {'\\', 'x', kHexDigits[byte >> 4], kHexDigits[byte & 15]};
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

// A name as a bare word when that reads back unambiguously, else quoted.
std::string name_text(const std::string& name) {
  bool bare = !name.empty() && name != "_";
  for (char c : name) bare = bare && is_bare_char(c);
  return bare ? name : quote(name);
}

// The shortest text that reads back to `value`, always with a '.', an
// exponent, or inf/nan, so that it never reads back as an integer.
template <typename Float>
std::string float_text(Float value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  if (text.find_first_not_of("-0123456789") == std::string::npos) text += ".0";
  return text;
}

template <typename T, typename Format>
std::string join(const std::vector<T>& items, Format format, const char* separator) {
  std::string text;
  for (size_t i = 0; i < items.size(); ++i) text += (i ? separator : "") + format(items[i]);
  return text;
}

template <typename T, typename Format>
std::string list_text(const std::vector<T>& items, Format format) {
  return "[" + join(items, format, ",") + "]";
}

std::string int_text(int64_t value) { return std::to_string(value); }

std::string attribute_text(const AttributeValue& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return int_text(*i);
  if (const auto* f = std::get_if<double>(&value)) return float_text(*f);
  if (const auto* s = std::get_if<std::string>(&value)) return quote(*s);
  if (const auto* ints = std::get_if<std::vector<int64_t>>(&value)) {
    return list_text(*ints, int_text);
  }
  const auto& floats = std::get<std::vector<double>>(value);
  return (floats.empty() ? "floats" : "") + list_text(floats, float_text<double>);
}

std::string tags_text(const Tags& tags) {
  std::string text = "{";
  for (const auto& [name, value] : tags) {
    text += (text.size() > 1 ? "," : "") + name_text(name) + ":" + std::to_string(value);
  }
  return text + "}";
}

// Constant data as numbers when they fill the shape exactly and print
// losslessly, else as hex bytes.
std::string data_text(const Tensor& tensor) {
  const auto& data = tensor.data;
  const size_t size = dtype_size(tensor.dtype);
  const int64_t count = num_elements(tensor.shape);
  std::vector<std::string> numbers;
  if (count >= 0 && data.size() == static_cast<size_t>(count) * size) {
    for (size_t offset = 0; offset < data.size(); offset += size) {
      if (tensor.dtype == DType::kFloat32) {
        float value;
        std::memcpy(&value, &data[offset], size);
        if (!std::isfinite(value)) break;
        numbers.push_back(float_text(value));
      } else if (tensor.dtype == DType::kInt64) {
        int64_t value;
        std::memcpy(&value, &data[offset], size);
        numbers.push_back(std::to_string(value));
      } else if (data[offset] <= 1) {
        numbers.push_back(std::to_string(data[offset]));
      } else {
        break;
      }
    }
  }
  if (numbers.size() * size == data.size()) {
    return list_text(numbers, [](const std::string& number) { return number; });
  }
  std::string hex = "0x";
  for (uint8_t byte : data) hex += {kHexDigits[byte >> 4], kHexDigits[byte & 15]};
  return hex;
}

class Printer {
 public:
  explicit Printer(const TaskGraph& graph) : graph_(graph), ops_(graph.op_graph()) {}

  std::string print() {
    for (const Tensor& tensor : ops_.tensors()) print_tensor(tensor);
    for (OpId id = 0; id < ops_.num_ops(); ++id) print_op(id);
    if (!ops_.inputs.empty()) {
      out_ += "inputs";
      for (TensorId input : ops_.inputs) out_ += " " + tensor_ref(input);
      out_ += "\n";
    }
    if (ops_.loss >= 0) {
      out_ += "loss " + tensor_ref(ops_.loss);
      if (ops_.loss_seed >= 0) out_ += " seed=" + tensor_ref(ops_.loss_seed);
      out_ += "\n";
    }
    for (const TrainedParameter& trained : ops_.trained) print_trained(trained);
    if (ops_.grad_norm >= 0) out_ += "grad_norm " + tensor_ref(ops_.grad_norm) + "\n";
    if (!graph_.shard_groups.empty()) {
      out_ += "shard_groups";
      for (const auto& group : graph_.shard_groups) out_ += " " + list_text(group, int_text);
      out_ += "\n";
    }
    for (TaskId id = 0; id < graph_.num_tasks(); ++id) print_task(id);
    for (const Edge& edge : graph_.edges()) {
      out_ += "edge " + std::to_string(edge.from) + " -> " + std::to_string(edge.to) + " " +
              to_string(edge.kind) + "\n";
    }
    return out_;
  }

 private:
  // Ids that name no tensor print as a quoted "#id", which parse() rejects.
  std::string tensor_ref(TensorId id) const {
    if (id == -1) return "_";
    if (id < 0 || id >= ops_.num_tensors()) return quote("#" + std::to_string(id));
    return name_text(ops_.tensor(id).name);
  }

  std::string tensor_refs(const std::vector<TensorId>& ids, const char* separator) const {
    return join(
        ids, [this](TensorId id) { return tensor_ref(id); }, separator);
  }

  void print_tensor(const Tensor& tensor) {
    out_ += "tensor " + name_text(tensor.name) + " " + to_string(tensor.dtype) +
            to_string(tensor.shape) + " " + to_string(tensor.role);
    if (!tensor.initializer.empty()) out_ += " init=" + name_text(tensor.initializer);
    if (tensor.int_high != 0) out_ += " high=" + std::to_string(tensor.int_high);
    if (tensor.accumulated) out_ += " accumulated=1";
    if (tensor.shard_of >= 0) out_ += " shard_of=" + tensor_ref(tensor.shard_of);
    if (!tensor.placement.is_replicated()) out_ += " placement=" + to_string(tensor.placement);
    if (tensor.placed_over_replicas) out_ += " over=replicas";
    if (!tensor.replica_initializers.empty()) {
      out_ +=
          " replica_inits=" + list_text(tensor.replica_initializers,
                                        [](const std::string& name) { return name_text(name); });
    }
    if (!tensor.dynamic.empty()) {
      out_ += " dynamic=" + list_text(tensor.dynamic, [this](const DynamicDim& dim) {
                return "(" + std::to_string(dim.dim) + ", " + tensor_ref(dim.extent) + ", " +
                       std::to_string(dim.scale) + ")";
              });
    }
    if (tensor.label_count.labels >= 0) {
      const LabelCount& count = tensor.label_count;
      out_ += " counts=(" + tensor_ref(count.labels) + ", " + std::to_string(count.ignore_index);
      if (!count.window.empty()) {
        out_ += ", " + list_text(count.window, [](const CountWindow& window) {
                  return "(" + std::to_string(window.start) + ", " + std::to_string(window.step) +
                         ", " + std::to_string(window.count) + ")";
                });
      }
      out_ += ")";
    }
    if (!tensor.data.empty()) out_ += " data=" + data_text(tensor);
    out_ += "\n";
  }

  void print_op(OpId id) {
    const Op& op = ops_.op(id);
    out_ += "op " + std::to_string(id) + " " + name_text(op.type) + " " + quote(op.name) + " (" +
            tensor_refs(op.inputs, ", ") + ") -> (" + tensor_refs(op.outputs, ", ") + ")";
    if (!op.attributes.empty()) {
      std::string attributes;
      for (const auto& [key, value] : op.attributes) {
        attributes +=
            (attributes.empty() ? "" : ", ") + name_text(key) + "=" + attribute_text(value);
      }
      out_ += " {" + attributes + "}";
    }
    out_ += " pass=" + to_string(op.pass) + " tags=" + tags_text(op.tags) + "\n";
  }

  void print_trained(const TrainedParameter& trained) {
    out_ += "trained " + tensor_ref(trained.parameter);
    if (trained.gradient >= 0) out_ += " grad=" + tensor_ref(trained.gradient);
    if (!trained.state.empty()) out_ += " state=[" + tensor_refs(trained.state, ",") + "]";
    out_ += "\n";
  }

  void print_task(TaskId id) {
    const Task& task = graph_.task(id);
    out_ += "task " + std::to_string(id) + " " + to_string(task.kind) + " " + to_string(task.pass) +
            " mb=" + std::to_string(task.microbatch) + " tags=" + tags_text(task.tags) +
            " devices=" + list_text(task.devices, int_text) + " stream=" + name_text(task.stream);
    if (!task.ops.empty()) out_ += " ops=" + list_text(task.ops, int_text);
    if (!task.tensors.empty()) out_ += " tensors=[" + tensor_refs(task.tensors, ",") + "]";
    if (task.peer != -1) out_ += " peer=" + std::to_string(task.peer);
    if (task.replica != 0) out_ += " replica=" + std::to_string(task.replica);
    if (task.average) out_ += " average=1";
    if (task.background) out_ += " background=1";
    out_ += "\n";
  }

  const TaskGraph& graph_;
  const OpGraph& ops_;
  std::string out_;
};

// ---------------------------------------------------------------- tokens

enum class TokenKind { kWord, kString, kPunct, kEnd };

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;  // for strings, the unescaped value
};

// Word characters also cover numbers: 1e-05, -3, +inf.
bool is_word_char(char c) { return is_bare_char(c) || c == '-' || c == '+'; }

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Tokenizer {
 public:
  Tokenizer(std::string line, int line_number) : line_(std::move(line)), number_(line_number) {}

  std::vector<Token> tokens() {
    std::vector<Token> tokens;
    while (skip_space_and_comment()) {
      const char c = line_[pos_];
      if (c == '"') {
        tokens.push_back({TokenKind::kString, read_string()});
      } else if (line_.compare(pos_, 2, "->") == 0) {
        tokens.push_back({TokenKind::kPunct, "->"});
        pos_ += 2;
      } else if (is_word_char(c)) {
        tokens.push_back({TokenKind::kWord, read_word()});
      } else if (std::string("()[]{},=:").find(c) != std::string::npos) {
        tokens.push_back({TokenKind::kPunct, std::string(1, c)});
        ++pos_;
      } else {
        fail("unexpected character '" + std::string(1, c) + "'");
      }
    }
    return tokens;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("line " + std::to_string(number_) + ": " + what);
  }

  // Moves to the next token; false at the end of the line or a comment.
  bool skip_space_and_comment() {
    while (pos_ < line_.size() &&
           (line_[pos_] == ' ' || line_[pos_] == '\t' || line_[pos_] == '\r')) {
      ++pos_;
    }
    return pos_ < line_.size() && line_[pos_] != '#';
  }

  // A word ends before "->", so "x->y" reads as three tokens.
  std::string read_word() {
    const size_t start = pos_;
    while (pos_ < line_.size() && is_word_char(line_[pos_]) && line_.compare(pos_, 2, "->") != 0) {
      ++pos_;
    }
    return line_.substr(start, pos_ - start);
  }

  std::string read_string() {
    std::string value;
    for (++pos_; pos_ < line_.size() && line_[pos_] != '"'; ++pos_) {
      if (line_[pos_] != '\\') {
        value += line_[pos_];
      } else {
        value += read_escape();
      }
    }
    if (pos_ == line_.size()) fail("expected closing '\"', got end of line");
    ++pos_;
    return value;
  }

  // At a backslash; leaves pos_ on the escape's last character.
  char read_escape() {
    const char c = ++pos_ < line_.size() ? line_[pos_] : '\0';
    switch (c) {
      case '"':
      case '\\':
        return c;
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'x':
        if (pos_ + 2 < line_.size() && hex_digit(line_[pos_ + 1]) >= 0 &&
            hex_digit(line_[pos_ + 2]) >= 0) {
          pos_ += 2;
          return static_cast<char>(hex_digit(line_[pos_ - 1]) * 16 + hex_digit(line_[pos_]));
        }
        fail("expected two hex digits after \\x");
      default:
        fail("expected an escape (\\\" \\\\ \\n \\t \\xHH) after '\\'");
    }
  }

  std::string line_;
  int number_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------- parsing

template <typename Number>
bool parse_number(const std::string& text, Number& value) {
  const char* end = text.data() + text.size();
  const auto result = std::from_chars(text.data(), end, value);
  return result.ec == std::errc() && result.ptr == end;
}

// Reads the tokens of one line, failing with "line N: expected X, got Y".
class LineReader {
 public:
  LineReader(std::vector<Token> tokens, int line_number)
      : tokens_(std::move(tokens)), number_(line_number) {}

  bool at_end() const { return pos_ == tokens_.size(); }
  const Token& peek() const { return at_end() ? end_ : tokens_[pos_]; }
  bool peek_punct(const char* punct) const {
    return peek().kind == TokenKind::kPunct && peek().text == punct;
  }

  [[noreturn]] void fail(const std::string& expected) const {
    const Token& token = peek();
    std::string got = token.kind == TokenKind::kEnd      ? "end of line"
                      : token.kind == TokenKind::kString ? quote(token.text)
                                                         : "'" + token.text + "'";
    throw std::invalid_argument("line " + std::to_string(number_) + ": expected " + expected +
                                ", got " + got);
  }

  bool accept(const char* punct) {
    if (!peek_punct(punct)) return false;
    ++pos_;
    return true;
  }
  void expect(const char* punct) {
    if (!accept(punct)) fail("'" + std::string(punct) + "'");
  }
  void expect_end() {
    if (!at_end()) fail("end of line");
  }

  std::string word(const std::string& what) {
    if (peek().kind != TokenKind::kWord) fail(what);
    return tokens_[pos_++].text;
  }
  // A bare word or a quoted string.
  std::string name(const std::string& what) {
    if (peek().kind == TokenKind::kString) return tokens_[pos_++].text;
    return word(what);
  }
  int64_t integer(const std::string& what) {
    int64_t value = 0;
    if (peek().kind != TokenKind::kWord || !parse_number(peek().text, value)) fail(what);
    ++pos_;
    return value;
  }

  // A word that names one of an enum's values, converted by `parse`.
  template <typename Parse>
  auto choice(const std::string& what, Parse parse) {
    try {
      auto value = parse(peek_word());
      skip();
      return value;
    } catch (const std::invalid_argument&) {
      fail(what);
    }
  }

  // `open item, item, ... close`, with `item` reading one element.
  template <typename Item>
  void list(const char* open, const char* close, Item item) {
    expect(open);
    if (accept(close)) return;
    do {
      item();
    } while (accept(","));
    expect(close);
  }

  // Optional `key=value` fields, each at most once, up to the end of the
  // line; `field(key)` reads the value.
  template <typename Field>
  void fields(const std::vector<std::string>& keys, Field field) {
    std::string expected;
    for (size_t i = 0; i < keys.size(); ++i) {
      expected += (i == 0 ? "" : i + 1 == keys.size() ? " or " : ", ") + keys[i] + "=";
    }
    std::set<std::string> left(keys.begin(), keys.end());
    while (!at_end()) {
      if (peek().kind != TokenKind::kWord || !left.count(peek().text)) fail(expected);
      const std::string key = word(expected);
      left.erase(key);
      expect("=");
      field(key);
    }
  }

  // The current word if it is one, else "" (which no caller accepts).
  std::string peek_word() const { return peek().kind == TokenKind::kWord ? peek().text : ""; }
  void skip() { ++pos_; }

 private:
  std::vector<Token> tokens_;
  int number_;
  size_t pos_ = 0;
  Token end_;
};

AttributeValue parse_attribute(LineReader& in) {
  if (in.peek().kind == TokenKind::kString) return in.name("an attribute value");
  const bool floats = in.peek_word() == "floats";
  if (floats) in.skip();
  if (floats || in.peek_punct("[")) {
    std::vector<int64_t> ints;
    std::vector<double> reals;
    bool all_ints = !floats;
    in.list("[", "]", [&] {
      int64_t integer = 0;
      double real = 0;
      if (!parse_number(in.peek_word(), real)) in.fail("a number");
      all_ints = all_ints && parse_number(in.peek_word(), integer);
      ints.push_back(integer);
      reals.push_back(real);
      in.skip();
    });
    if (all_ints) return ints;
    return reals;
  }
  int64_t integer = 0;
  double real = 0;
  const bool is_int = parse_number(in.peek_word(), integer);
  if (!is_int && !parse_number(in.peek_word(), real)) {
    in.fail("an attribute value (number, \"string\" or [list])");
  }
  in.skip();
  if (is_int) return integer;
  return real;
}

template <typename T>
void append_bytes(std::vector<uint8_t>& bytes, T value) {
  uint8_t raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  bytes.insert(bytes.end(), raw, raw + sizeof(T));
}

std::vector<uint8_t> parse_hex_data(LineReader& in) {
  const std::string hex = in.peek_word();
  std::vector<uint8_t> bytes;
  bool valid = hex.size() % 2 == 0 && hex.rfind("0x", 0) == 0;
  for (size_t i = 2; valid && i < hex.size(); i += 2) {
    valid = hex_digit(hex[i]) >= 0 && hex_digit(hex[i + 1]) >= 0;
    bytes.push_back(static_cast<uint8_t>(hex_digit(hex[i]) * 16 + hex_digit(hex[i + 1])));
  }
  if (!valid) in.fail("hex bytes (0x0a1b...) or [numbers]");
  in.skip();
  return bytes;
}

std::vector<uint8_t> parse_data(LineReader& in, DType dtype) {
  if (!in.peek_punct("[")) return parse_hex_data(in);
  std::vector<uint8_t> bytes;
  in.list("[", "]", [&] {
    const std::string text = in.peek_word();
    float real = 0;
    int64_t integer = 0;
    if (dtype == DType::kFloat32 && parse_number(text, real)) {
      append_bytes(bytes, real);
    } else if (dtype == DType::kInt64 && parse_number(text, integer)) {
      append_bytes(bytes, integer);
    } else if (dtype == DType::kBool && (text == "0" || text == "1")) {
      bytes.push_back(text == "1");
    } else {
      in.fail("a " + to_string(dtype) + " value");
    }
    in.skip();
  });
  return bytes;
}

// Builds the graph line by line.
class Parser {
 public:
  TaskGraph parse(const std::string& text) {
    size_t start = 0;
    for (int number = 1; start <= text.size(); ++number) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      LineReader in(Tokenizer(text.substr(start, end - start), number).tokens(), number);
      if (!in.at_end()) parse_line(in);
      start = end + 1;
    }
    return std::move(graph_);
  }

 private:
  using LineParser = void (Parser::*)(LineReader&);

  OpGraph& ops() { return graph_.op_graph(); }

  void parse_line(LineReader& in) {
    static const std::map<std::string, LineParser> kLines = {
        {"tensor", &Parser::parse_tensor},
        {"op", &Parser::parse_op},
        {"inputs", &Parser::parse_inputs},
        {"loss", &Parser::parse_loss},
        {"trained", &Parser::parse_trained},
        {"task", &Parser::parse_task},
        {"edge", &Parser::parse_edge},
        {"grad_norm", &Parser::parse_grad_norm},
        {"shard_groups", &Parser::parse_shard_groups},
    };
    const auto found = kLines.find(in.peek_word());
    if (found == kLines.end()) {
      in.fail("tensor, op, inputs, loss, trained, grad_norm, shard_groups, task or edge");
    }
    in.skip();
    (this->*found->second)(in);
  }

  // A declared tensor's name.
  TensorId tensor_ref(LineReader& in) {
    const bool is_name = in.peek().kind == TokenKind::kWord || in.peek().kind == TokenKind::kString;
    const auto found = names_.find(in.peek().text);
    if (!is_name || found == names_.end()) in.fail("the name of a declared tensor");
    in.skip();
    return found->second;
  }
  // A tensor name, or `_` for none.
  TensorId optional_tensor_ref(LineReader& in) {
    if (in.peek_word() != "_") return tensor_ref(in);
    in.skip();
    return -1;
  }
  std::vector<TensorId> tensor_list(LineReader& in, const char* open, const char* close) {
    std::vector<TensorId> ids;
    in.list(open, close, [&] { ids.push_back(optional_tensor_ref(in)); });
    return ids;
  }
  std::vector<int> int_list(LineReader& in) {
    std::vector<int> values;
    in.list("[", "]", [&] { values.push_back(static_cast<int>(in.integer("an integer"))); });
    return values;
  }
  Tags tags(LineReader& in) {
    Tags result;
    in.list("{", "}", [&] {
      const std::string name = in.name("a tag name");
      in.expect(":");
      result[name] = in.integer("a tag value");
    });
    return result;
  }
  // Ops and tasks carry their index, so that tasks and edges can refer to them.
  void index(LineReader& in, int expected, const char* what) {
    int64_t value = -1;
    if (!parse_number(in.peek_word(), value) || value != expected) {
      in.fail(std::string(what) + " index " + std::to_string(expected));
    }
    in.skip();
  }

  void parse_tensor(LineReader& in) {
    Tensor tensor;
    if (in.peek().kind != TokenKind::kEnd && names_.count(in.peek().text)) {
      in.fail("a new tensor name");
    }
    tensor.name = in.name("a tensor name");
    tensor.dtype = in.choice("a dtype (f32, i64, bool)", parse_dtype);
    in.list("[", "]", [&] { tensor.shape.push_back(in.integer("a dimension")); });
    tensor.role = in.choice(
        "a role (input, activation, parameter, gradient, optimizer_state, loss, constant)",
        parse_role);
    in.fields({"init", "high", "accumulated", "shard_of", "placement", "over", "replica_inits",
               "dynamic", "counts", "data"},
              [&](const std::string& key) {
                if (key == "init") tensor.initializer = in.name("an initializer name");
                if (key == "high") tensor.int_high = in.integer("an integer");
                if (key == "accumulated") tensor.accumulated = in.integer("0 or 1") != 0;
                if (key == "shard_of") tensor.shard_of = tensor_ref(in);
                if (key == "placement") tensor.placement = placement(in);
                if (key == "over") tensor.placed_over_replicas = over_replicas(in);
                if (key == "replica_inits") {
                  in.list("[", "]", [&] {
                    tensor.replica_initializers.push_back(in.name("an initializer name"));
                  });
                }
                if (key == "dynamic") tensor.dynamic = dynamic_dims(in);
                if (key == "counts") tensor.label_count = label_count(in);
                if (key == "data") tensor.data = parse_data(in, tensor.dtype);
              });
    const std::string name = tensor.name;
    names_[name] = ops().add_tensor(std::move(tensor));
  }

  // [(dim, extent, scale), ...]
  std::vector<DynamicDim> dynamic_dims(LineReader& in) {
    std::vector<DynamicDim> dims;
    in.list("[", "]", [&] {
      DynamicDim dim;
      in.expect("(");
      dim.dim = static_cast<int>(in.integer("a dimension index"));
      in.expect(",");
      dim.extent = tensor_ref(in);
      in.expect(",");
      dim.scale = in.integer("a scale");
      in.expect(")");
      dims.push_back(dim);
    });
    return dims;
  }

  // (labels, ignore_index[, [(start, step, count), ...]])
  LabelCount label_count(LineReader& in) {
    LabelCount count;
    in.expect("(");
    count.labels = tensor_ref(in);
    in.expect(",");
    count.ignore_index = in.integer("an ignore_index");
    if (in.accept(",")) {
      in.list("[", "]", [&] {
        CountWindow window;
        in.expect("(");
        window.start = in.integer("a window start");
        in.expect(",");
        window.step = in.integer("a window step");
        in.expect(",");
        window.count = in.integer("a window count");
        in.expect(")");
        count.window.push_back(window);
      });
    }
    in.expect(")");
    return count;
  }

  void parse_op(LineReader& in) {
    index(in, ops().num_ops(), "op");
    Op op;
    op.type = in.name("an op type");
    op.name = in.name("an op name");
    op.inputs = tensor_list(in, "(", ")");
    in.expect("->");
    op.outputs = tensor_list(in, "(", ")");
    if (in.peek_punct("{")) {
      in.list("{", "}", [&] {
        const std::string key = in.name("an attribute name");
        in.expect("=");
        op.attributes[key] = parse_attribute(in);
      });
    }
    in.fields({"pass", "tags"}, [&](const std::string& key) {
      if (key == "pass") op.pass = in.choice("a pass (F, B, BI, BW, U)", parse_pass);
      if (key == "tags") op.tags = tags(in);
    });
    ops().add_op(std::move(op));
  }

  void parse_inputs(LineReader& in) {
    do {
      ops().inputs.push_back(tensor_ref(in));
    } while (!in.at_end());
  }

  void parse_loss(LineReader& in) {
    ops().loss = tensor_ref(in);
    in.fields({"seed"}, [&](const std::string&) { ops().loss_seed = tensor_ref(in); });
  }

  void parse_grad_norm(LineReader& in) { ops().grad_norm = tensor_ref(in); }

  void parse_shard_groups(LineReader& in) {
    while (in.peek().kind != TokenKind::kEnd) {
      std::vector<int>& group = graph_.shard_groups.emplace_back();
      in.list("[", "]", [&] { group.push_back(static_cast<int>(in.integer("a rank"))); });
    }
  }

  // R, P or S(DIM).
  bool over_replicas(LineReader& in) {
    return in.choice("the group a placement is over (replicas)", [](const std::string& word) {
      if (word != "replicas") throw std::invalid_argument(word);
      return true;
    });
  }

  Placement placement(LineReader& in) {
    if (in.peek_word() != "S") return in.choice("a placement (R, P or S(DIM))", parse_placement);
    in.skip();
    in.expect("(");
    const auto dim = static_cast<int>(in.integer("a dimension"));
    in.expect(")");
    return Placement::sharded(dim);
  }

  void parse_trained(LineReader& in) {
    TrainedParameter trained;
    trained.parameter = tensor_ref(in);
    in.fields({"grad", "state"}, [&](const std::string& key) {
      if (key == "grad") trained.gradient = tensor_ref(in);
      if (key == "state") trained.state = tensor_list(in, "[", "]");
    });
    ops().trained.push_back(std::move(trained));
  }

  void parse_task(LineReader& in) {
    index(in, graph_.num_tasks(), "task");
    Task task;
    task.kind = in.choice(
        "a task kind (compute, send, recv, all_reduce, reduce_scatter, all_gather, all_to_all, "
        "broadcast)",
        parse_task_kind);
    task.pass = in.choice("a pass (F, B, BI, BW, U)", parse_pass);
    in.fields({"mb", "tags", "devices", "stream", "ops", "tensors", "peer", "replica", "average",
               "background"},
              [&](const std::string& key) {
                if (key == "mb") task.microbatch = static_cast<int>(in.integer("a microbatch"));
                if (key == "tags") task.tags = tags(in);
                if (key == "devices") task.devices = int_list(in);
                if (key == "stream") task.stream = in.name("a stream name");
                if (key == "ops") task.ops = int_list(in);
                if (key == "tensors") task.tensors = tensor_list(in, "[", "]");
                if (key == "peer") task.peer = static_cast<int>(in.integer("a peer device"));
                if (key == "replica") task.replica = static_cast<int>(in.integer("a replica"));
                if (key == "average") task.average = in.integer("0 or 1") != 0;
                if (key == "background") task.background = in.integer("0 or 1") != 0;
              });
    graph_.add_task(std::move(task));
  }

  void parse_edge(LineReader& in) {
    const auto from = static_cast<TaskId>(in.integer("a task index"));
    in.expect("->");
    const auto to = static_cast<TaskId>(in.integer("a task index"));
    EdgeKind kind = EdgeKind::kData;
    if (!in.at_end()) {
      const std::string text = in.peek_word();
      if (text != "data" && text != "temporal" && text != "window") {
        in.fail("data, temporal or window");
      }
      kind = text == "data"       ? EdgeKind::kData
             : text == "temporal" ? EdgeKind::kTemporal
                                  : EdgeKind::kWindow;
      in.skip();
    }
    in.expect_end();
    graph_.add_edge(from, to, kind);
  }

  TaskGraph graph_{OpGraph()};
  std::map<std::string, TensorId> names_;
};

}  // namespace

std::string print(const TaskGraph& graph) { return Printer(graph).print(); }

TaskGraph parse(const std::string& text) { return Parser().parse(text); }

}  // namespace piper::ir
