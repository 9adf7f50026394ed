#include "formats/external_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <optional>

#include "formats/error.h"
#include "formats/onnx_model.h"

namespace piper::formats {
namespace {

namespace fs = std::filesystem;

using TensorVisit = std::function<void(const onnx::TensorProto& tensor, const std::string& what)>;

void visit_graph(const onnx::GraphProto& graph, const std::string& scope, const TensorVisit& visit);

void visit_sparse(const onnx::SparseTensorProto& sparse, const std::string& what,
                  const TensorVisit& visit) {
  visit(sparse.values(), what + " (values)");
  visit(sparse.indices(), what + " (indices)");
}

void visit_nodes(const google::protobuf::RepeatedPtrField<onnx::NodeProto>& nodes,
                 const std::string& scope, const TensorVisit& visit) {
  for (const auto& node : nodes) {
    const std::string name = node.name().empty() ? node.op_type() : node.name();
    for (const auto& attr : node.attribute()) {
      const std::string what = "tensor attribute '" + attr.name() + "' of node '" + name + "'";
      if (attr.has_t()) visit(attr.t(), what + scope);
      for (const auto& tensor : attr.tensors()) visit(tensor, what + scope);
      if (attr.has_sparse_tensor()) visit_sparse(attr.sparse_tensor(), what + scope, visit);
      for (const auto& sparse : attr.sparse_tensors()) visit_sparse(sparse, what + scope, visit);
      const std::string body = " in a subgraph of node '" + name + "'" + scope;
      if (attr.has_g()) visit_graph(attr.g(), body, visit);
      for (const auto& graph : attr.graphs()) visit_graph(graph, body, visit);
    }
  }
}

void visit_graph(const onnx::GraphProto& graph, const std::string& scope,
                 const TensorVisit& visit) {
  for (const auto& init : graph.initializer())
    visit(init, "initializer '" + init.name() + "'" + scope);
  for (const auto& sparse : graph.sparse_initializer()) {
    visit_sparse(sparse, "sparse initializer '" + sparse.values().name() + "'" + scope, visit);
  }
  visit_nodes(graph.node(), scope, visit);
}

// Every tensor the model holds, wherever the checker would look at it.
void visit_tensors(const onnx::ModelProto& model, const TensorVisit& visit) {
  visit_graph(model.graph(), "", visit);
  for (const auto& function : model.functions()) {
    visit_nodes(function.node(), " in function '" + function.name() + "'", visit);
  }
}

// The same over a model the caller owns and may change: no tensor is const, so casting the
// const away is well defined.
void visit_tensors(onnx::ModelProto& model,
                   const std::function<void(onnx::TensorProto& tensor)>& visit) {
  visit_tensors(static_cast<const onnx::ModelProto&>(model),
                [&](const onnx::TensorProto& tensor, const std::string&) {
                  visit(const_cast<onnx::TensorProto&>(tensor));
                });
}

bool is_external(const onnx::TensorProto& tensor) {
  return tensor.data_location() == onnx::TensorProto::EXTERNAL;
}

// What a tensor's external_data entries say.
struct Reference {
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
};

uint64_t parse_count(const std::string& text, const std::string& what) {
  const bool digits =
      !text.empty() && text.size() <= 19 &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) throw Error(what + " is '" + text + "', not a byte count");
  return std::stoull(text);
}

Reference reference(const onnx::TensorProto& tensor, const std::string& what) {
  Reference ref;
  bool located = false;
  for (const auto& entry : tensor.external_data()) {
    if (entry.key() == "location") {
      ref.location = entry.value();
      located = true;
    } else if (entry.key() == "offset") {
      ref.offset = parse_count(entry.value(), what + ": external_data offset");
    } else if (entry.key() == "length") {
      ref.length = parse_count(entry.value(), what + ": external_data length");
    }
  }
  if (!located || ref.location.empty()) {
    throw Error(what + " is stored externally but names no external_data location");
  }
  return ref;
}

std::deque<std::string> components(const std::string& path) {
  std::deque<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    parts.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// Judged from the text alone, before anything is looked up.
bool stays_inside_as_written(const std::string& location) {
  if (location.front() == '/' || location.find('\0') != std::string::npos) return false;
  const auto parts = components(location);
  return std::none_of(parts.begin(), parts.end(), [](const std::string& p) { return p == ".."; });
}

std::string system_error() { return std::strerror(errno); }

// Thrown from inside resolve(): the location's file is missing or not a regular file.
struct NotAFile {
  std::string why;
};

NotAFile lookup_failure() {
  return NotAFile{errno == ENOENT ? "does not exist"
                                  : "cannot be looked up (" + system_error() + ")"};
}

std::string read_link(const fs::path& link) {
  std::string target(4096, '\0');
  const ssize_t size = ::readlink(link.c_str(), target.data(), target.size());
  if (size < 0 || static_cast<size_t>(size) == target.size()) {
    throw NotAFile{"is a symlink that cannot be read"};
  }
  target.resize(static_cast<size_t>(size));
  return target;
}

// Follows `location` from `folder` (canonical) one component at a time, reading each symlink
// without following it, so that nothing outside the folder is ever looked up: nullopt when
// the location leads out. The result is a path through no symlink; `info` is its lstat.
std::optional<fs::path> resolve(const fs::path& folder, const std::string& location,
                                struct stat& info) {
  std::deque<std::string> todo = components(location);
  fs::path current = folder;
  bool looked_up = false;
  int links = 0;
  while (!todo.empty()) {
    const std::string part = todo.front();
    todo.pop_front();
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (current == folder) return std::nullopt;
      current = current.parent_path();
      looked_up = false;
      continue;
    }
    const fs::path next = current / part;
    if (::lstat(next.c_str(), &info) != 0) throw lookup_failure();
    if (!S_ISLNK(info.st_mode)) {
      current = next;
      looked_up = true;
      continue;
    }
    if (++links > 40) throw NotAFile{"goes through more than 40 symlinks"};
    const std::string target = read_link(next);
    std::deque<std::string> rest = components(target);
    if (!target.empty() && target.front() == '/') {
      // Inside only when the target spells out the folder's own (canonical) path first.
      for (const auto& folder_part : components(folder.string())) {
        while (!rest.empty() && (rest.front().empty() || rest.front() == ".")) rest.pop_front();
        if (folder_part.empty()) continue;
        if (rest.empty() || rest.front() != folder_part) return std::nullopt;
        rest.pop_front();
      }
      current = folder;
      looked_up = false;
    }
    todo.insert(todo.begin(), rest.begin(), rest.end());
  }
  if (!looked_up && ::lstat(current.c_str(), &info) != 0) throw lookup_failure();
  if (!S_ISREG(info.st_mode)) throw NotAFile{"is not a regular file"};
  return current;
}

// The bytes the tensor's shape and type need; nullopt for a type of unknown width.
std::optional<uint64_t> needed_bytes(const onnx::TensorProto& tensor, const std::string& what) {
  const size_t width = onnx_element_size(tensor.data_type());
  if (width == 0) return std::nullopt;
  uint64_t bytes = width;
  for (const int64_t dim : tensor.dims()) {
    if (dim < 0) throw Error(what + " has a negative dimension " + std::to_string(dim));
    if (dim != 0 && bytes > UINT64_MAX / static_cast<uint64_t>(dim)) {
      throw Error(what + "'s shape has more bytes than 2^64");
    }
    bytes *= static_cast<uint64_t>(dim);
  }
  return bytes;
}

// The location as a message can show it: control characters (a NUL would end the message)
// as \xNN.
std::string printable(const std::string& text) {
  std::string shown;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      shown += c;
      continue;
    }
    constexpr char kHex[] = "0123456789abcdef";
    shown += std::string("\\x") + kHex[byte >> 4] + kHex[byte & 15];
  }
  return shown;
}

std::string outside_message(const std::string& at) {
  return at +
         ", which is outside the model's folder (an absolute path, a '..' component or a "
         "symlink leading out); Piper reads external data only from files inside the folder of "
         "the .onnx: put the file there and give its location relative to it "
         "(onnx.save_model(model, path, save_as_external_data=True, location=\"weights.bin\"))";
}

}  // namespace

ExternalData::ExternalData(const onnx::ModelProto& model, const std::string& model_path)
    : model_path_(model_path) {
  visit_tensors(model, [&](const onnx::TensorProto& tensor, const std::string& what) {
    if (is_external(tensor)) check(tensor, "model '" + model_path + "': " + what);
  });
}

void ExternalData::check(const onnx::TensorProto& tensor, const std::string& what) {
  const Reference ref = reference(tensor, what);
  const std::string at =
      what + " keeps its data at external_data location '" + printable(ref.location) + "'";
  if (!stays_inside_as_written(ref.location)) throw Error(outside_message(at));
  const uint64_t size = file(ref.location, at).size;
  const std::optional<uint64_t> needed = needed_bytes(tensor, what);
  const uint64_t length = ref.length.value_or(needed.value_or(size - std::min(size, ref.offset)));
  if (needed && length != *needed) {
    throw Error(what + " (ONNX type " + std::to_string(tensor.data_type()) + ", " +
                std::to_string(tensor.dims_size()) + " dimensions) needs " +
                std::to_string(*needed) + " bytes, but its external_data length is " +
                std::to_string(length) + "; re-save the model with its external data");
  }
  if (ref.offset > size || length > size - ref.offset) {
    throw Error(at + ": its data is bytes [" + std::to_string(ref.offset) + ", " +
                std::to_string(ref.offset + length) + ") of the file, which holds " +
                std::to_string(size) +
                " bytes (truncated, or another model's?); re-save the model with its external "
                "data");
  }
}

const ExternalFile& ExternalData::file(const std::string& location, const std::string& at) {
  if (const auto found = files_.find(location); found != files_.end()) return found->second;
  if (folder_.empty()) {
    std::error_code error;
    folder_ = fs::canonical(fs::absolute(model_path_).parent_path(), error).string();
    if (error) {
      throw Error("model '" + model_path_ + "': cannot resolve its folder: " + error.message());
    }
  }
  struct stat info {};
  std::optional<fs::path> path;
  try {
    path = resolve(folder_, location, info);
  } catch (const NotAFile& not_a_file) {
    throw Error(at + ", which " + not_a_file.why + " in the model's folder '" + folder_ +
                "'; put the weights file saved with the model there");
  }
  if (!path) throw Error(outside_message(at));
  const int64_t mtime_ns = static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 +
                           static_cast<int64_t>(info.st_mtim.tv_nsec);
  ExternalFile file{location, path->string(), static_cast<uint64_t>(info.st_size), mtime_ns};
  return files_.emplace(location, std::move(file)).first->second;
}

std::vector<ExternalFile> ExternalData::files() const {
  std::vector<ExternalFile> files;
  for (const auto& [location, file] : files_) files.push_back(file);
  return files;
}

ExternalData::Range ExternalData::range(const onnx::TensorProto& tensor) const {
  const std::string what = "model '" + model_path_ + "': tensor '" + tensor.name() + "'";
  const Reference ref = reference(tensor, what);
  const auto found = files_.find(ref.location);
  if (!is_external(tensor) || found == files_.end()) {
    throw Error(what + " is not external data of this model that Piper checked");
  }
  const uint64_t size = found->second.size;
  const std::optional<uint64_t> needed = needed_bytes(tensor, what);
  return {&found->second, ref.offset,
          ref.length.value_or(needed.value_or(size - std::min(size, ref.offset)))};
}

uint64_t ExternalData::length(const onnx::TensorProto& tensor) const {
  return range(tensor).length;
}

void ExternalData::read(const onnx::TensorProto& tensor, uint64_t offset, uint64_t count,
                        const ByteSink& sink) const {
  const Range whole = range(tensor);
  const std::string file = "external data file '" + whole.file->location + "' of model '" +
                           model_path_ + "' (tensor '" + tensor.name() + "')";
  if (offset > whole.length || count > whole.length - offset) {
    throw Error(file + ": bytes [" + std::to_string(offset) + ", " +
                std::to_string(offset + count) + ") are past the tensor's " +
                std::to_string(whole.length));
  }
  // O_NOFOLLOW: the checked path goes through no symlink, and a file swapped for one since
  // is not followed out of the folder.
  const int fd = ::open(whole.file->path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) throw Error(file + ": cannot open: " + system_error());
  constexpr uint64_t kPiece = uint64_t{64} << 20;
  std::vector<uint8_t> buffer(static_cast<size_t>(std::min(count, kPiece)));
  uint64_t done = 0;
  while (done < count) {
    const size_t want = static_cast<size_t>(std::min(count - done, kPiece));
    const ssize_t got =
        ::pread(fd, buffer.data(), want, static_cast<off_t>(whole.offset + offset + done));
    if (got <= 0) {
      const std::string why =
          got == 0 ? "it ended early (changed since it was checked?)" : system_error();
      ::close(fd);
      throw Error(file + ": cannot read bytes at " + std::to_string(whole.offset + offset + done) +
                  ": " + why);
    }
    try {
      sink(buffer.data(), static_cast<size_t>(got));
    } catch (...) {
      ::close(fd);
      throw;
    }
    done += static_cast<uint64_t>(got);
  }
  ::close(fd);
}

onnx::ModelProto ExternalData::with_resolved_locations(const onnx::ModelProto& model) const {
  onnx::ModelProto resolved = model;
  visit_tensors(resolved, [&](onnx::TensorProto& tensor) {
    if (!is_external(tensor)) return;
    for (auto& entry : *tensor.mutable_external_data()) {
      if (entry.key() == "location") entry.set_value(files_.at(entry.value()).path);
    }
  });
  return resolved;
}

plan::ExternalFile to_plan(const ExternalFile& file) {
  plan::ExternalFile recorded;
  recorded.set_location(file.location);
  recorded.set_size(file.size);
  recorded.set_mtime_ns(file.mtime_ns);
  return recorded;
}

void check_unchanged(const ExternalData& external,
                     const google::protobuf::RepeatedPtrField<plan::ExternalFile>& recorded,
                     const std::string& model_path) {
  const std::vector<ExternalFile> now = external.files();
  for (const plan::ExternalFile& planned : recorded) {
    const std::string file =
        "external data file '" + planned.location() + "' of model '" + model_path + "'";
    const auto found = std::find_if(now.begin(), now.end(), [&](const ExternalFile& f) {
      return f.location == planned.location();
    });
    if (found == now.end()) {
      throw Error("the plan records " + file + ", which the model does not read; re-plan");
    }
    if (found->size != planned.size() || found->mtime_ns != planned.mtime_ns()) {
      throw Error(file + " changed after planning (planned: " + std::to_string(planned.size()) +
                  " bytes modified at " + std::to_string(planned.mtime_ns()) + " ns, now " +
                  std::to_string(found->size) + " bytes modified at " +
                  std::to_string(found->mtime_ns) + " ns); re-plan with the model as it is now");
    }
  }
}

void inline_external_data(onnx::ModelProto& model, const ExternalData& external,
                          const std::function<bool(const onnx::TensorProto&)>& wanted) {
  visit_tensors(model, [&](onnx::TensorProto& tensor) {
    if (!is_external(tensor) || !wanted(tensor)) return;
    std::string* raw = tensor.mutable_raw_data();
    raw->reserve(static_cast<size_t>(external.length(tensor)));
    external.read(tensor, 0, external.length(tensor), [&](const uint8_t* data, size_t size) {
      raw->append(reinterpret_cast<const char*>(data), size);
    });
    tensor.clear_external_data();
    tensor.clear_data_location();
  });
}

}  // namespace piper::formats
