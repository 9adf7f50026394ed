// The strategy file: batch, optimizer, precision, frozen parameters, the
// annotations that tag ONNX nodes, and the ordered directives that turn the
// task DAG into a distributed one. docs/strategy.md is the user's reference;
// schemas/strategy.schema.json describes the same format for editors.
//
// Parsing validates everything the file alone can tell (keys, types, ranges,
// contradictions); whether a directive applies to a given model is the
// planner's question. Every error is a piper::Error whose message starts with
// the file name and names the JSON path: "s.json: $.directives[1].devices: ...".
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "formats/lr_schedule.h"

namespace piper::strategy {

// replicate's default gradient bucket, as PyTorch DDP's bucket_cap_mb = 25.
inline constexpr int64_t kDefaultBucketSize = int64_t{25} << 20;

// The microbatch of a task that no split has cloned: it matches only "MB": "*".
inline constexpr int64_t kNoMicrobatch = -1;

// One named axis of the device mesh, "mesh": [["dp", 2], ["tp", 2]]. Devices are numbered
// row-major over the axes, the last fastest.
struct MeshAxis {
  std::string name;
  int64_t size = 1;
  bool operator==(const MeshAxis&) const = default;
};

// Selects tasks by tag values, microbatch and pass. `{}` matches every task.
struct Filter {
  // Tag name -> value; "MB" (the microbatch) is kept here too. nullopt = "*".
  std::map<std::string, std::optional<int64_t>> tags;
  // "F", "B", "BI", "BW" or "U"; nullopt = any pass ("*" or absent).
  std::optional<std::string> pass;
  bool operator==(const Filter&) const = default;
};

// Fields that do not apply to `type` keep these defaults and are not written.
struct Optimizer {
  std::string type = "sgd";         // "sgd" | "adamw"
  double lr = 0.01;                 // adamw's default is 0.001
  double momentum = 0;              // sgd only
  double dampening = 0;             // sgd only
  bool nesterov = false;            // sgd only
  double beta1 = 0.9;               // adamw only
  double beta2 = 0.999;             // adamw only
  double eps = 1e-8;                // adamw only
  double weight_decay = 0;          // adamw's default is 0.01
  formats::LrSchedule lr_schedule;  // step s trains at lr · lr_factor(lr_schedule, s)
  double clip_grad_norm = 0;        // > 0: the global gradient norm's bound; 0: no clipping
  bool operator==(const Optimizer&) const = default;
};

// Every ONNX node whose name matches `match` (glob_match) gets `tags`.
struct Annotation {
  std::string match;
  std::map<std::string, int64_t> tags;
  bool operator==(const Annotation&) const = default;
};

// One struct per directive; docs/strategy.md describes each field. Device
// lists are non-empty and hold distinct indices >= 0. A directive written with
// "axis": NAME holds its resolution (mesh_axis_leaders, mesh_axis_groups) in
// `devices` or `groups`; the name itself stays only in Directive::json.
struct SplitDirective {
  static constexpr std::string_view kOp = "split";
  Filter filter;
  std::string dim_name;
  int64_t num_microbatches = 1;
  bool operator==(const SplitDirective&) const = default;
};

struct PlaceDirective {
  static constexpr std::string_view kOp = "place";
  Filter filter;
  std::vector<int64_t> devices;
  std::string stream = "compute";
  bool operator==(const PlaceDirective&) const = default;
};

// The shard_* flags are stored resolved: shard_params implies shard_grads,
// which implies shard_optimizer.
struct ReplicateDirective {
  static constexpr std::string_view kOp = "replicate";
  Filter filter;
  std::vector<int64_t> devices;
  int64_t bucket_size = kDefaultBucketSize;  // bytes
  bool shard_optimizer = false;
  bool shard_grads = false;
  bool shard_params = false;
  std::string gather_stream = "dp_gather";
  std::string reduce_stream = "dp_reduce";
  bool operator==(const ReplicateDirective&) const = default;
};

// Tensor parallelism: the initializers `params` names are split along a dimension over each
// group; every other directive names a group by its first device (its leader), which the
// group's devices then run as one. With style "expert", the experts `tag` numbers are spread
// over each group instead.
struct ShardDirective {
  static constexpr std::string_view kOp = "shard";
  Filter filter;
  // Initializer glob -> the dimension of the stored tensor that is split.
  std::map<std::string, int64_t> params;
  // Disjoint groups of equal size, in group order ("devices": [0, 1] is one group,
  // [[0, 1], [2, 3]] two; "axis": NAME is mesh_axis_groups).
  std::vector<std::vector<int64_t>> groups;
  bool sequence_parallel = false;  // only with params
  std::string style;               // "" (params) | "expert"
  std::optional<std::string> tag;  // set exactly when style is "expert"
  std::string stream = "compute";
  // Set by the planner, never parsed: the groups are the device sets data parallelism
  // replicates over (expert parallelism), not tensor-parallel groups.
  bool over_replicas = false;
  // Set by the planner: the path of the shard directive over the replicas that splits its
  // parameters before this tensor-parallel one ("" when there is none).
  std::string after_expert_split;
  bool operator==(const ShardDirective&) const = default;
};

struct OrderDirective {
  static constexpr std::string_view kOp = "order";
  std::vector<std::vector<Filter>> filters;  // groups, run one after another
  std::optional<int64_t> device;
  bool operator==(const OrderDirective&) const = default;
};

struct RecomputeDirective {
  static constexpr std::string_view kOp = "recompute";
  Filter filter;
  bool operator==(const RecomputeDirective&) const = default;
};

struct PipelineDirective {
  static constexpr std::string_view kOp = "pipeline";
  // "gpipe" | "1f1b" | "interleaved" | "zb-h1" | "dualpipe" | "dualpipev"
  std::string schedule;
  std::string tag = "PP";
  std::vector<int64_t> devices;
  int64_t num_microbatches = 1;
  int64_t chunks = 1;        // > 1 only for "interleaved"
  bool auto_stages = false;  // "stages": "auto"
  // Data parallelism over whole pipelines: per device of `devices`, the devices its stages are
  // replicated over (it among them), one replicate per stage; empty: none. "axis" resolves
  // them from the mesh's other axes (mesh_replicas), "replicas" lists them.
  std::vector<std::vector<int64_t>> replicas;
  int64_t zero = 0;                    // those replicates' ZeRO stage, as the zero directive's
  std::optional<int64_t> bucket_size;  // bytes; replicate's default when absent
  bool operator==(const PipelineDirective&) const = default;
};

struct ZeroDirective {
  static constexpr std::string_view kOp = "zero";
  int64_t stage = 0;  // 0..3
  std::vector<int64_t> devices;
  std::optional<int64_t> bucket_size;  // bytes
  bool operator==(const ZeroDirective&) const = default;
};

using DirectiveSpec =
    std::variant<SplitDirective, PlaceDirective, ReplicateDirective, ShardDirective, OrderDirective,
                 RecomputeDirective, PipelineDirective, ZeroDirective>;

struct Directive {
  size_t index = 0;  // position in $.directives
  std::string op;    // the spec's kOp
  std::string path;  // "$.directives[2]": prefix for messages naming a field
  DirectiveSpec spec;
  nlohmann::json json;  // the object as written, for --expand printing
  // Compares index, op, path and spec; `json` is how it was spelled, not what
  // it means.
  bool operator==(const Directive& other) const;
};

struct Strategy {
  std::string source;  // the file name messages start with
  int64_t global_batch = 0;
  Optimizer optimizer;
  std::string precision = "fp32";   // "fp32" | "tf32" | "bf16"
  std::vector<std::string> frozen;  // glob patterns over initializer names
  std::vector<Annotation> annotations;
  std::vector<MeshAxis> mesh;  // empty: no mesh; directives name devices
  std::vector<Directive> directives;
  bool operator==(const Strategy&) const = default;
};

// Parses and validates a strategy. Throws piper::Error starting with
// `source_name` ("name:line:column: invalid JSON: ..." or "name: $.path: ...").
Strategy parse_strategy(const std::string& text, const std::string& source_name);

// JSON as strategy files are read: duplicated keys are refused (nlohmann::json
// would keep the last); errors are piper::Error, "source:line:column: invalid
// JSON: ..." or "source: $.path: duplicate key ...".
nlohmann::json parse_json_text(const std::string& text, const std::string& source_name);

// Reads `path` and parses it with `path` as the source name. Throws
// piper::Error naming the file when it is missing or unreadable.
Strategy load_strategy(const std::string& path);

// The strategy with every default written out; parse_strategy of its dump
// gives back an equal Strategy.
nlohmann::json to_json(const Strategy& strategy);
nlohmann::json to_json(const Directive& directive);  // {"op": ..., every field}
nlohmann::json to_json(const DirectiveSpec& spec);
nlohmann::json to_json(const Filter& filter);

// Device meshes. Devices are numbered row-major over the axes, the last axis fastest: in
// [["dp", 2], ["tp", 2]] device 1 is dp 0, tp 1. `axis` indexes `mesh`.
//
// The number of devices of the mesh: the product of its sizes (1 for no axes).
int64_t mesh_device_count(const std::vector<MeshAxis>& mesh);
// The devices along `axis` whose every other coordinate is 0, in coordinate order: what
// place, replicate, pipeline and zero get for "axis": NAME (other directives name a
// tensor-parallel group by its first device). [["dp", 2], ["tp", 2]]: dp [0, 2], tp [0, 1].
std::vector<int64_t> mesh_axis_leaders(const std::vector<MeshAxis>& mesh, size_t axis);
// One group per set of devices that differ only in `axis`' coordinate, each in coordinate
// order, groups ordered by their first device: what shard gets for "axis": NAME.
// [["dp", 2], ["tp", 2]]: tp [[0, 1], [2, 3]], dp [[0, 2], [1, 3]].
std::vector<std::vector<int64_t>> mesh_axis_groups(const std::vector<MeshAxis>& mesh, size_t axis);
// The devices that differ from `device` only along `axes` (indices into `mesh`, in mesh
// order), row-major over those axes: the devices a pipeline stage on `device` is replicated
// over. [["dp", 2], ["pp", 2]], device 1, axes {0}: [1, 3].
std::vector<int64_t> mesh_replicas(const std::vector<MeshAxis>& mesh, int64_t device,
                                   const std::vector<size_t>& axes);

// Whether a task with these tags, microbatch (kNoMicrobatch when unsplit) and
// pass is selected by `filter`. A tag (or MB) named in the filter but absent
// from the task matches only "*"; tags of the task the filter does not name
// are ignored. Passes compare exactly: "B" does not select "BI" or "BW".
bool matches(const Filter& filter, const std::map<std::string, int64_t>& tags, int64_t microbatch,
             const std::string& pass);

// fnmatch(3)-style: '*' any run of characters, including '/' and '.'; '?' one
// character; "[...]" a set; '\' escapes. "/blocks.1/*" matches
// "/blocks.1/attn/MatMul". The whole text must match.
bool glob_match(const std::string& pattern, const std::string& text);

// The directive vocabulary, in documentation order, and each op's keys
// ("op" first). directive_keys throws piper::Error for an unknown op.
const std::vector<std::string>& directive_ops();
const std::vector<std::string>& directive_keys(std::string_view op);

}  // namespace piper::strategy
