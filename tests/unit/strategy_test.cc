// Strategy files: every directive parsed into its struct, defaults, one test
// per error class checking the message, filters and globs, the to_json round
// trip, and the files shipped in samples/ and schemas/.
#include "formats/strategy.h"

#include <gmock/gmock.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "formats/atomic_file.h"
#include "formats/error.h"
#include "tests/unit/strategy_test_util.h"

namespace piper::strategy {
namespace {

using nlohmann::json;

TEST(StrategyLimits, NestingDeeperThan256IsRefusedNotACrash) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(error_of(R"({"batch": {"global": 8}, "frozen": )" + deep + "}"),
              ::testing::HasSubstr("nested deeper than 256 levels"));
  const std::string fine = std::string(200, '[') + std::string(200, ']');
  EXPECT_THAT(error_of(R"({"batch": {"global": 8}, "frozen": )" + fine + "}"),
              ::testing::Not(::testing::HasSubstr("nested deeper")));
}

TEST(StrategyLimits, ListsDevicesAndMicrobatchesAreBounded) {
  std::string many = "[";
  for (int i = 0; i <= 100000; ++i) many += std::string(i ? "," : "") + R"({"op": "x"})";
  EXPECT_THAT(
      error_of(with_directives(many + "]")),
      ::testing::HasSubstr("$.directives: holds 100001 entries; Piper takes at most 100000"));
  EXPECT_THAT(error_of(with_directives(R"([{"op": "place", "devices": [65536]}])")),
              ::testing::HasSubstr("distinct device indices in [0, 65536), got [65536]"));
  EXPECT_THAT(error_of(with_directives(
                  R"([{"op": "split", "dim_name": "MB", "num_microbatches": 65537}])")),
              ::testing::HasSubstr("$.directives[0].num_microbatches"));
  EXPECT_THAT(error_of(R"({"batch": {"global": 4611686018427387904}})"),
              ::testing::HasSubstr("$.batch.global"));
}

constexpr const char* kFull = R"({
  "batch": {"global": 64},
  "optimizer": {"type": "adamw", "lr": 0.0003, "betas": [0.8, 0.95], "eps": 1e-6,
                "weight_decay": 0.1},
  "precision": "bf16",
  "frozen": ["embed.*", "blocks.0.*"],
  "annotations": [
    {"match": "/blocks.[0-1]/*", "tags": {"PP": 0}},
    {"match": "/blocks.1/*", "tags": {"LAYER": 1, "Expert_2": 3}}
  ],
  "directives": [
    {"op": "split", "filter": {"PP": "*"}, "dim_name": "batch", "num_microbatches": 4},
    {"op": "place", "filter": {"PP": 0, "MB": 2, "PASS": "F"}, "devices": [0, 1],
     "stream": "side"},
    {"op": "replicate", "filter": {"PP": 1}, "devices": [2, 3], "bucket_size": 1048576,
     "shard_grads": true, "gather_stream": "g", "reduce_stream": "r"},
    {"op": "shard", "filter": {"LAYER": 1}, "devices": [0, 1], "style": "expert",
     "tag": "Expert_2", "stream": "ep"},
    {"op": "order", "filters": [[{"MB": 0, "PASS": "F"}], [{"MB": 1, "PASS": "BI"},
                                {"MB": 0, "PASS": "*"}]], "device": 1},
    {"op": "recompute", "filter": {"LAYER": "*"}},
    {"op": "pipeline", "schedule": "interleaved", "tag": "STAGE", "devices": [0, 1],
     "num_microbatches": 8, "chunks": 2, "stages": "auto"},
    {"op": "zero", "stage": 2, "devices": [0, 1, 2, 3], "bucket_size": 4096}
  ]
})";

TEST(StrategyParse, FullStrategyGivesEveryStruct) {
  const Strategy s = parse_strategy(kFull, "full.json");
  EXPECT_EQ(s.source, "full.json");
  EXPECT_EQ(s.global_batch, 64);
  EXPECT_EQ(s.optimizer.type, "adamw");
  EXPECT_DOUBLE_EQ(s.optimizer.lr, 0.0003);
  EXPECT_DOUBLE_EQ(s.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(s.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(s.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(s.optimizer.weight_decay, 0.1);
  EXPECT_EQ(s.precision, "bf16");
  EXPECT_EQ(s.frozen, (std::vector<std::string>{"embed.*", "blocks.0.*"}));
  ASSERT_EQ(s.annotations.size(), 2u);
  EXPECT_EQ(s.annotations[0], (Annotation{"/blocks.[0-1]/*", {{"PP", 0}}}));
  EXPECT_EQ(s.annotations[1], (Annotation{"/blocks.1/*", {{"LAYER", 1}, {"Expert_2", 3}}}));

  ASSERT_EQ(s.directives.size(), 8u);
  const std::vector<std::string> ops = {"split", "place",     "replicate", "shard",
                                        "order", "recompute", "pipeline",  "zero"};
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(s.directives[i].index, i);
    EXPECT_EQ(s.directives[i].op, ops[i]);
    EXPECT_EQ(s.directives[i].path, "$.directives[" + std::to_string(i) + "]");
    EXPECT_EQ(s.directives[i].json.at("op"), ops[i]);
  }
  EXPECT_EQ(spec_of<SplitDirective>(s, 0),
            (SplitDirective{.filter = {.tags = {{"PP", std::nullopt}}, .pass = std::nullopt},
                            .dim_name = "batch",
                            .num_microbatches = 4}));
  EXPECT_EQ(spec_of<PlaceDirective>(s, 1),
            (PlaceDirective{.filter = {.tags = {{"PP", 0}, {"MB", 2}}, .pass = "F"},
                            .devices = {0, 1},
                            .stream = "side"}));
  ReplicateDirective replicate;
  replicate.filter.tags = {{"PP", 1}};
  replicate.devices = {2, 3};
  replicate.bucket_size = 1 << 20;
  replicate.shard_optimizer = true;  // implied by shard_grads
  replicate.shard_grads = true;
  replicate.gather_stream = "g";
  replicate.reduce_stream = "r";
  EXPECT_EQ(spec_of<ReplicateDirective>(s, 2), replicate);
  ShardDirective shard;
  shard.filter.tags = {{"LAYER", 1}};
  shard.groups = {{0, 1}};
  shard.style = "expert";
  shard.tag = "Expert_2";
  shard.stream = "ep";
  EXPECT_EQ(spec_of<ShardDirective>(s, 3), shard);
  const OrderDirective& order = spec_of<OrderDirective>(s, 4);
  ASSERT_EQ(order.filters.size(), 2u);
  EXPECT_EQ(order.filters[0], (std::vector<Filter>{{.tags = {{"MB", 0}}, .pass = "F"}}));
  EXPECT_EQ(order.filters[1], (std::vector<Filter>{{.tags = {{"MB", 1}}, .pass = "BI"},
                                                   {.tags = {{"MB", 0}}, .pass = std::nullopt}}));
  EXPECT_EQ(order.device, 1);
  EXPECT_EQ(spec_of<RecomputeDirective>(s, 5).filter.tags,
            (std::map<std::string, std::optional<int64_t>>{{"LAYER", std::nullopt}}));
  EXPECT_EQ(spec_of<PipelineDirective>(s, 6), (PipelineDirective{.schedule = "interleaved",
                                                                 .tag = "STAGE",
                                                                 .devices = {0, 1},
                                                                 .num_microbatches = 8,
                                                                 .chunks = 2,
                                                                 .auto_stages = true,
                                                                 .replicas = {},
                                                                 .zero = 0,
                                                                 .bucket_size = std::nullopt}));
  EXPECT_EQ(spec_of<ZeroDirective>(s, 7),
            (ZeroDirective{.stage = 2, .devices = {0, 1, 2, 3}, .bucket_size = 4096}));
}

TEST(StrategyParse, TopLevelSchemaKeyIsIgnored) {
  const std::string body = R"("batch": {"global": 8}, "directives": [{"op": "zero", "stage": 2,
      "devices": [0, 1]}])";
  EXPECT_EQ(
      parse_strategy(R"({"$schema": "../schemas/strategy.schema.json", )" + body + "}", "s.json"),
      parse_strategy("{" + body + "}", "s.json"));
}

TEST(StrategyParse, DefaultsFollowPyTorch) {
  const Strategy s = parse_strategy(R"({"batch": {"global": 1}})", "s.json");
  EXPECT_EQ(s.optimizer, Optimizer{});
  EXPECT_EQ(s.optimizer.type, "sgd");
  EXPECT_DOUBLE_EQ(s.optimizer.lr, 0.01);
  EXPECT_DOUBLE_EQ(s.optimizer.weight_decay, 0);
  EXPECT_EQ(s.precision, "fp32");
  EXPECT_TRUE(s.frozen.empty() && s.annotations.empty() && s.directives.empty());

  const Optimizer adamw =
      parse_strategy(R"({"batch": {"global": 1}, "optimizer": {"type": "adamw"}})", "s.json")
          .optimizer;
  EXPECT_DOUBLE_EQ(adamw.lr, 0.001);
  EXPECT_DOUBLE_EQ(adamw.beta1, 0.9);
  EXPECT_DOUBLE_EQ(adamw.beta2, 0.999);
  EXPECT_DOUBLE_EQ(adamw.eps, 1e-8);
  EXPECT_DOUBLE_EQ(adamw.weight_decay, 0.01);

  const Optimizer nesterov = parse_strategy(R"({"batch": {"global": 1}, "optimizer":
      {"type": "sgd", "momentum": 0.9, "nesterov": true}})",
                                            "s.json")
                                 .optimizer;
  EXPECT_TRUE(nesterov.nesterov);
  EXPECT_DOUBLE_EQ(nesterov.momentum, 0.9);
}

TEST(StrategyParse, DirectiveDefaults) {
  const Strategy s = parse_strategy(with_directives(R"([
    {"op": "split", "dim_name": "batch", "num_microbatches": 2},
    {"op": "place", "devices": [0]},
    {"op": "replicate", "devices": [0, 1], "shard_params": true},
    {"op": "replicate", "devices": [0, 1]},
    {"op": "shard", "devices": [0, 1], "params": {"fc1.weight": 0}},
    {"op": "order", "filters": [[{}]]},
    {"op": "recompute"},
    {"op": "pipeline", "schedule": "1f1b", "devices": [0, 1], "num_microbatches": 4},
    {"op": "zero", "stage": 0, "devices": [3]}
  ])"),
                                    "s.json");
  EXPECT_EQ(spec_of<SplitDirective>(s, 0).filter, Filter{});
  EXPECT_EQ(spec_of<PlaceDirective>(s, 1), (PlaceDirective{.filter = {}, .devices = {0}}));
  const ReplicateDirective& zero3 = spec_of<ReplicateDirective>(s, 2);
  EXPECT_TRUE(zero3.shard_params && zero3.shard_grads && zero3.shard_optimizer);
  const ReplicateDirective& plain = spec_of<ReplicateDirective>(s, 3);
  EXPECT_FALSE(plain.shard_params || plain.shard_grads || plain.shard_optimizer);
  EXPECT_EQ(plain.bucket_size, 25 * 1024 * 1024);
  EXPECT_EQ(plain.gather_stream, "dp_gather");
  EXPECT_EQ(plain.reduce_stream, "dp_reduce");
  EXPECT_EQ(spec_of<ShardDirective>(s, 4).tag, std::nullopt);
  EXPECT_EQ(spec_of<ShardDirective>(s, 4).style, "");
  EXPECT_FALSE(spec_of<ShardDirective>(s, 4).sequence_parallel);
  EXPECT_EQ(spec_of<ShardDirective>(s, 4).stream, "compute");
  EXPECT_EQ(spec_of<OrderDirective>(s, 5).device, std::nullopt);
  EXPECT_EQ(spec_of<RecomputeDirective>(s, 6).filter, Filter{});
  const PipelineDirective& pipeline = spec_of<PipelineDirective>(s, 7);
  EXPECT_EQ(pipeline.tag, "PP");
  EXPECT_EQ(pipeline.chunks, 1);
  EXPECT_FALSE(pipeline.auto_stages);
  EXPECT_EQ(spec_of<ZeroDirective>(s, 8).bucket_size, std::nullopt);
}

TEST(StrategyParse, IntegralNumbersAreIntegersAsInJsonSchema) {
  EXPECT_EQ(parse_strategy(R"({"batch": {"global": 32.0}})", "s.json").global_batch, 32);
}

class StrategyErrors : public testing::TestWithParam<ErrorCase> {};

TEST_P(StrategyErrors, MessageNamesFileAndPath) {
  EXPECT_EQ(error_of(GetParam().text), GetParam().message);
}

const std::string kBatch = R"("batch": {"global": 8})";

INSTANTIATE_TEST_SUITE_P(
    InvalidJson, StrategyErrors,
    testing::Values(
        ErrorCase{"TrailingComma", "{\n  \"batch\": {\"global\": 8},\n}",
                  "strategy.json:3:1: invalid JSON: syntax error while parsing object key - "
                  "unexpected '}'; expected string literal"},
        ErrorCase{"BadLiteral", "{\n  \"batch\": {\"global\": x}\n}",
                  "strategy.json:2:23: invalid JSON: syntax error while parsing value - invalid "
                  "literal; last read: '\"global\": x'"},
        ErrorCase{"Empty", "",
                  "strategy.json:1:1: invalid JSON: syntax error while parsing value - "
                  "unexpected end of input; expected '[', '{', or a literal"},
        ErrorCase{"NumberOverflow",
                  "{\"batch\": {\"global\": 8},\n \"optimizer\": {\"lr\": 1e999}}",
                  "strategy.json:2:22: invalid JSON: number overflow parsing '1e999'"},
        ErrorCase{"DuplicateKey",
                  R"({"batch": {"global": 8}, "directives": [{}, {"op": "place", "op": "zero"}]})",
                  "strategy.json: $.directives[1].op: duplicate key (a key may appear once per "
                  "object)"},
        ErrorCase{"NotAnObject", "[1, 2]", "strategy.json: $: expected an object, got [1,2]"}),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    UnknownKeys, StrategyErrors,
    testing::Values(
        ErrorCase{"TopLevel", "{" + kBatch + R"(, "precison": "bf16"})",
                  "strategy.json: $.precison: unknown key; expected one of $schema, batch, "
                  "optimizer, precision, frozen, annotations, mesh, directives"},
        ErrorCase{"Optimizer", "{" + kBatch + R"(, "optimizer": {"type": "adamw", "betta": 1}})",
                  "strategy.json: $.optimizer.betta: unknown key; expected one of type, lr, "
                  "betas, eps, weight_decay, lr_schedule, clip_grad_norm"},
        ErrorCase{"OtherOptimizersKey",
                  "{" + kBatch + R"(, "optimizer": {"type": "sgd", "eps": 1}})",
                  "strategy.json: $.optimizer.eps: only valid for type \"adamw\", not \"sgd\""},
        ErrorCase{"Directive", with_directives(R"([{"op": "place", "devices": [0], "device": 0}])"),
                  "strategy.json: $.directives[0].device: unknown key; expected one of op, "
                  "filter, devices, axis, stream"},
        ErrorCase{"Annotation", "{" + kBatch + R"(, "annotations": [{"match": "*", "tag": {}}]})",
                  "strategy.json: $.annotations[0].tag: unknown key; expected one of match, tags"},
        ErrorCase{"Op", with_directives(R"([{"op": "zero", "stage": 1, "devices": [0]},
                                            {"op": "pipe"}])"),
                  "strategy.json: $.directives[1].op: unknown directive \"pipe\"; expected one of "
                  "split, place, replicate, shard, order, recompute, pipeline, zero"},
        ErrorCase{"OddKeyIsQuoted", "{" + kBatch + R"(, "a b": 1})",
                  "strategy.json: $[\"a b\"]: unknown key; expected one of $schema, batch, "
                  "optimizer, precision, frozen, annotations, mesh, directives"},
        // "$schema" is for the file as a whole: inside an object it is as unknown as any key.
        ErrorCase{"SchemaInBatch", R"({"batch": {"global": 8, "$schema": "s.json"}})",
                  "strategy.json: $.batch[\"$schema\"]: unknown key; expected one of global"},
        ErrorCase{"SchemaInDirective",
                  with_directives(R"([{"op": "place", "devices": [0], "$schema": "s.json"}])"),
                  "strategy.json: $.directives[0][\"$schema\"]: unknown key; expected one of op, "
                  "filter, devices, axis, stream"}),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    WrongTypes, StrategyErrors,
    testing::Values(
        ErrorCase{"DevicesString", with_directives(R"([{"op": "place", "devices": [0]},
                                                       {"op": "place", "devices": "0"}])"),
                  "strategy.json: $.directives[1].devices: expected a non-empty array of "
                  "distinct device indices in [0, 65536), got \"0\""},
        ErrorCase{
            "BatchString", R"({"batch": {"global": "8"}})",
            "strategy.json: $.batch.global: expected an integer from 1 to 2147483648, got \"8\""},
        ErrorCase{
            "BatchFraction", R"({"batch": {"global": 8.5}})",
            "strategy.json: $.batch.global: expected an integer from 1 to 2147483648, got 8.5"},
        ErrorCase{"SchemaNumber", "{" + kBatch + R"(, "$schema": 1})",
                  "strategy.json: $[\"$schema\"]: expected a non-empty string, got 1"},
        ErrorCase{"NesterovNumber",
                  "{" + kBatch + R"(, "optimizer": {"type": "sgd", "nesterov": 1}})",
                  "strategy.json: $.optimizer.nesterov: expected true or false, got 1"},
        ErrorCase{"Betas", "{" + kBatch + R"(, "optimizer": {"type": "adamw", "betas": 0.9}})",
                  "strategy.json: $.optimizer.betas: expected [beta1, beta2], each a number in "
                  "[0, 1), got 0.9"},
        ErrorCase{"Frozen", "{" + kBatch + R"(, "frozen": "embed.*"})",
                  "strategy.json: $.frozen: expected an array of glob patterns, got \"embed.*\""},
        ErrorCase{"Filter", with_directives(R"([{"op": "recompute", "filter": [{"PP": 0}]}])"),
                  "strategy.json: $.directives[0].filter: expected a filter (an object of tag: "
                  "index or \"*\", \"PASS\": pass), got [{\"PP\":0}]"},
        ErrorCase{"FilterValue", with_directives(R"([{"op": "recompute", "filter": {"PP": "0"}}])"),
                  "strategy.json: $.directives[0].filter.PP: expected an integer >= 0 or \"*\", "
                  "got \"0\""},
        ErrorCase{"OrderGroup", with_directives(R"([{"op": "order", "filters": [{"PP": 0}]}])"),
                  "strategy.json: $.directives[0].filters[0]: expected a non-empty array of "
                  "filters, got {\"PP\":0}"},
        ErrorCase{"Op", with_directives(R"([{"op": 3}])"),
                  "strategy.json: $.directives[0].op: expected a directive name (string), got 3"},
        ErrorCase{"DirectiveNotObject", with_directives(R"(["place"])"),
                  "strategy.json: $.directives[0]: expected an object, got \"place\""},
        ErrorCase{
            "LongValueIsShortened",
            with_directives(
                R"([{"op": "place", "devices": "0123456789012345678901234567890123456789012345678901234567890123456789"}])"),
            "strategy.json: $.directives[0].devices: expected a non-empty array of "
            "distinct device indices in [0, 65536), got "
            "\"01234567890123456789012345678901234567890123456789012345..."}),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    OutOfRange, StrategyErrors,
    testing::Values(
        ErrorCase{"BatchZero", R"({"batch": {"global": 0}})",
                  "strategy.json: $.batch.global: expected an integer from 1 to 2147483648, got 0"},
        ErrorCase{"LrZero", "{" + kBatch + R"(, "optimizer": {"type": "sgd", "lr": 0}})",
                  "strategy.json: $.optimizer.lr: expected a number > 0, got 0"},
        ErrorCase{"Momentum", "{" + kBatch + R"(, "optimizer": {"type": "sgd", "momentum": -1}})",
                  "strategy.json: $.optimizer.momentum: expected a number >= 0, got -1"},
        ErrorCase{"Beta2", "{" + kBatch + R"(, "optimizer": {"type": "adamw", "betas": [0.9, 1]}})",
                  "strategy.json: $.optimizer.betas[1]: expected a number in [0, 1), got 1"},
        ErrorCase{"OptimizerType", "{" + kBatch + R"(, "optimizer": {"type": "adam"}})",
                  "strategy.json: $.optimizer.type: expected one of \"sgd\", \"adamw\", got "
                  "\"adam\""},
        ErrorCase{"Precision", "{" + kBatch + R"(, "precision": "fp16"})",
                  "strategy.json: $.precision: expected one of \"fp32\", \"tf32\", \"bf16\", got "
                  "\"fp16\""},
        ErrorCase{"DuplicateDevice", with_directives(R"([{"op": "place", "devices": [1, 1]}])"),
                  "strategy.json: $.directives[0].devices: expected a non-empty array of "
                  "distinct device indices in [0, 65536), got [1,1]"},
        ErrorCase{"NegativeDevice", with_directives(R"([{"op": "replicate", "devices": [-1]}])"),
                  "strategy.json: $.directives[0].devices: expected a non-empty array of "
                  "distinct device indices in [0, 65536), got [-1]"},
        ErrorCase{"NoDevices", with_directives(R"([{"op": "zero", "stage": 1, "devices": []}])"),
                  "strategy.json: $.directives[0].devices: expected a non-empty array of "
                  "distinct device indices in [0, 65536), got []"},
        ErrorCase{
            "Microbatches",
            with_directives(R"([{"op": "split", "dim_name": "b", "num_microbatches": 0}])"),
            "strategy.json: $.directives[0].num_microbatches: expected an integer from 1 to 65536, "
            "got 0"},
        ErrorCase{"DimNameNotAName",
                  with_directives(R"([{"op": "split", "dim_name": "2b", "num_microbatches": 2}])"),
                  "strategy.json: $.directives[0].dim_name: \"2b\" cannot name the microbatch "
                  "index in filters; expected letters, digits and _, not starting with a digit, "
                  "other than \"PASS\" (\"MB\" is usual)"},
        ErrorCase{"DimNameIsATag",
                  "{" + kBatch + R"(, "annotations": [{"match": "*", "tags": {"LAYER": 0}}],
                  "directives": [{"op": "split", "dim_name": "LAYER", "num_microbatches": 2}]})",
                  "strategy.json: $.directives[0].dim_name: \"LAYER\" names the microbatch "
                  "index, but $.annotations[0] uses it as a tag; choose another name"},
        ErrorCase{"DimNameAndMBDisagree",
                  with_directives(R"([{"op": "split", "dim_name": "c", "num_microbatches": 2},
                  {"op": "recompute", "filter": {"c": 0, "MB": 1}}])"),
                  "strategy.json: $.directives[1]: a filter selects microbatches by both \"MB\" "
                  "and \"c\" (the split's dim_name) differently"},
        ErrorCase{"ZeroStage", with_directives(R"([{"op": "zero", "stage": 4, "devices": [0]}])"),
                  "strategy.json: $.directives[0].stage: expected an integer from 0 to 3, got 4"},
        ErrorCase{"BucketSize",
                  with_directives(R"([{"op": "replicate", "devices": [0], "bucket_size": 0}])"),
                  "strategy.json: $.directives[0].bucket_size: expected a positive integer, got 0"},
        ErrorCase{"Style", with_directives(R"([{"op": "shard", "devices": [0], "style": "col"}])"),
                  "strategy.json: $.directives[0].style: expected one of \"expert\", got "
                  "\"col\""},
        ErrorCase{"Schedule", with_directives(R"([{"op": "pipeline", "schedule": "zb",
                                                   "devices": [0], "num_microbatches": 1}])"),
                  "strategy.json: $.directives[0].schedule: expected one of \"gpipe\", \"1f1b\", "
                  "\"interleaved\", \"zb-h1\", \"dualpipe\", \"dualpipev\", got \"zb\""},
        ErrorCase{"Stages", with_directives(R"([{"op": "pipeline", "schedule": "gpipe", "devices":
                                                 [0], "num_microbatches": 1, "stages": 2}])"),
                  "strategy.json: $.directives[0].stages: expected one of \"auto\", got 2"},
        ErrorCase{"Pass", with_directives(R"([{"op": "order", "filters": [[{"PASS": "W"}]]}])"),
                  "strategy.json: $.directives[0].filters[0][0].PASS: expected one of \"F\", "
                  "\"B\", \"BI\", \"BW\", \"U\", \"*\", got \"W\""},
        ErrorCase{"OrderDevice",
                  with_directives(R"([{"op": "order", "filters": [[{}]], "device": -2}])"),
                  "strategy.json: $.directives[0].device: expected an integer >= 0, got -2"},
        ErrorCase{"EmptyOrder", with_directives(R"([{"op": "order", "filters": []}])"),
                  "strategy.json: $.directives[0].filters: expected groups: a non-empty array of "
                  "non-empty arrays of filters, got []"},
        ErrorCase{"AnnotationTagValue",
                  "{" + kBatch + R"(, "annotations": [{"match": "*", "tags": {"PP": -1}}]})",
                  "strategy.json: $.annotations[0].tags.PP: expected an integer >= 0, got -1"},
        ErrorCase{"EmptyString", with_directives(R"([{"op": "place", "devices": [0],
                                                      "stream": ""}])"),
                  "strategy.json: $.directives[0].stream: expected a non-empty string, got \"\""}),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    MissingRequired, StrategyErrors,
    testing::Values(
        ErrorCase{"Batch", "{}", "strategy.json: $: missing required key \"batch\""},
        ErrorCase{"Global", R"({"batch": {}})",
                  "strategy.json: $.batch: missing required key \"global\""},
        ErrorCase{"OptimizerType", "{" + kBatch + R"(, "optimizer": {"lr": 1}})",
                  "strategy.json: $.optimizer: missing required key \"type\""},
        ErrorCase{"Op", with_directives(R"([{"devices": [0]}])"),
                  "strategy.json: $.directives[0]: missing required key \"op\"; "
                  "expected one of split, place, replicate, shard, order, recompute, "
                  "pipeline, zero"},
        ErrorCase{"Devices", with_directives(R"([{"op": "place"}])"),
                  "strategy.json: $.directives[0]: missing required key \"devices\" (or "
                  "\"axis\", a mesh axis)"},
        ErrorCase{"Microbatches", with_directives(R"([{"op": "pipeline", "schedule": "1f1b",
                                                   "devices": [0]}])"),
                  "strategy.json: $.directives[0]: missing required key "
                  "\"num_microbatches\""},
        ErrorCase{"ExpertTag",
                  with_directives(R"([{"op": "shard", "devices": [0], "style": "expert"}])"),
                  "strategy.json: $.directives[0]: missing required key \"tag\" "
                  "(style \"expert\" needs the tag that names experts)"},
        ErrorCase{"Match", "{" + kBatch + R"(, "annotations": [{"tags": {"PP": 0}}]})",
                  "strategy.json: $.annotations[0]: missing required key \"match\""}),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Contradictions, StrategyErrors,
    testing::Values(
        ErrorCase{"ShardParamsWithoutGrads",
                  with_directives(R"([{"op": "replicate", "devices": [0, 1],
                                       "shard_params": true, "shard_grads": false}])"),
                  "strategy.json: $.directives[0].shard_grads: false contradicts shard_params "
                  "true (sharded parameters imply sharded gradients); drop shard_grads or set it "
                  "true"},
        ErrorCase{"ShardGradsWithoutOptimizer",
                  with_directives(R"([{"op": "replicate", "devices": [0, 1],
                                       "shard_grads": true, "shard_optimizer": false}])"),
                  "strategy.json: $.directives[0].shard_optimizer: false contradicts shard_grads "
                  "true (sharded gradients or parameters imply sharded optimizer state); drop "
                  "shard_optimizer or set it true"},
        ErrorCase{"ShardParamsWithoutOptimizer",
                  with_directives(R"([{"op": "replicate", "devices": [0, 1],
                                       "shard_params": true, "shard_optimizer": false}])"),
                  "strategy.json: $.directives[0].shard_optimizer: false contradicts shard_params "
                  "true (sharded gradients or parameters imply sharded optimizer state); drop "
                  "shard_optimizer or set it true"},
        ErrorCase{"NesterovWithoutMomentum",
                  "{" + kBatch + R"(, "optimizer": {"type": "sgd", "nesterov": true}})",
                  "strategy.json: $.optimizer.nesterov: true needs momentum > 0 and dampening 0 "
                  "(as in PyTorch); got momentum 0.0, dampening 0.0"},
        ErrorCase{"NesterovWithDampening",
                  "{" + kBatch +
                      R"(, "optimizer": {"type": "sgd", "momentum": 0.9, "dampening": 0.1,
                                         "nesterov": true}})",
                  "strategy.json: $.optimizer.nesterov: true needs momentum > 0 and dampening 0 "
                  "(as in PyTorch); got momentum 0.9, dampening 0.1"},
        ErrorCase{"ChunksWithoutInterleaving",
                  with_directives(R"([{"op": "pipeline", "schedule": "1f1b", "devices": [0, 1],
                                       "num_microbatches": 4, "chunks": 2}])"),
                  "strategy.json: $.directives[0].chunks: more than one chunk per device needs "
                  "schedule \"interleaved\", not \"1f1b\""},
        ErrorCase{
            "TagOnParamsShard",
            with_directives(R"([{"op": "shard", "devices": [0], "params": {"w": 0}, "tag": "E"}])"),
            "strategy.json: $.directives[0].tag: only valid with style \"expert\", not "
            "with \"params\""}),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    TagNames, StrategyErrors,
    testing::Values(
        ErrorCase{"ReservedMB",
                  "{" + kBatch + R"(, "annotations": [{"match": "*", "tags": {"MB": 0}}]})",
                  "strategy.json: $.annotations[0].tags.MB: the tag name \"MB\" is reserved (the "
                  "microbatch index split gives); choose another name"},
        ErrorCase{"ReservedPass",
                  with_directives(R"([{"op": "pipeline", "schedule": "gpipe", "tag": "PASS",
                                       "devices": [0], "num_microbatches": 1}])"),
                  "strategy.json: $.directives[0].tag: the tag name \"PASS\" is reserved (the "
                  "pass: F, B, BI, BW, U); choose another name"},
        ErrorCase{"NotIdentifier",
                  "{" + kBatch + R"(, "annotations": [{"match": "*", "tags": {"1PP": 0}}]})",
                  "strategy.json: $.annotations[0].tags[\"1PP\"]: \"1PP\" is not a tag name; "
                  "expected letters, digits and _, not starting with a digit"},
        ErrorCase{"FilterKey", with_directives(R"([{"op": "recompute", "filter": {"P-P": 0}}])"),
                  "strategy.json: $.directives[0].filter[\"P-P\"]: \"P-P\" is not a tag name; "
                  "expected letters, digits and _, not starting with a digit"},
        ErrorCase{"NoTags", "{" + kBatch + R"(, "annotations": [{"match": "*", "tags": {}}]})",
                  "strategy.json: $.annotations[0].tags: expected a non-empty object of tag "
                  "name: index, got {}"}),
    [](const auto& info) { return info.param.name; });

TEST(StrategyFilter, MatchesTagsMicrobatchAndPass) {
  const std::map<std::string, int64_t> tags = {{"PP", 1}, {"LAYER", 5}};
  EXPECT_TRUE(matches(Filter{}, tags, 3, "F"));
  EXPECT_TRUE(matches(Filter{}, {}, kNoMicrobatch, "U"));
  EXPECT_TRUE(matches({.tags = {{"PP", 1}}, .pass = std::nullopt}, tags, 0, "B"));
  EXPECT_FALSE(matches({.tags = {{"PP", 0}}, .pass = std::nullopt}, tags, 0, "B"));
  EXPECT_TRUE(matches({.tags = {{"PP", 1}, {"LAYER", 5}}, .pass = "F"}, tags, 0, "F"));
  EXPECT_FALSE(matches({.tags = {{"PP", 1}}, .pass = "F"}, tags, 0, "B"));
  EXPECT_FALSE(matches({.tags = {}, .pass = "B"}, tags, 0, "BI")) << "passes compare exactly";
  EXPECT_TRUE(matches({.tags = {{"MB", 3}}, .pass = std::nullopt}, tags, 3, "F"));
  EXPECT_FALSE(matches({.tags = {{"MB", 3}}, .pass = std::nullopt}, tags, 2, "F"));
  EXPECT_FALSE(matches({.tags = {{"MB", 0}}, .pass = std::nullopt}, tags, kNoMicrobatch, "F"));
  EXPECT_TRUE(
      matches({.tags = {{"MB", std::nullopt}}, .pass = std::nullopt}, tags, kNoMicrobatch, "F"));
  // A tag the task lacks matches "*" only.
  EXPECT_FALSE(matches({.tags = {{"EXPERT", 0}}, .pass = std::nullopt}, tags, 0, "F"));
  EXPECT_TRUE(matches({.tags = {{"EXPERT", std::nullopt}}, .pass = std::nullopt}, tags, 0, "F"));
}

TEST(StrategyFilter, ParsedFiltersMatch) {
  const Strategy s = parse_strategy(
      with_directives(R"([{"op": "recompute", "filter": {"PP": 0, "MB": "*", "PASS": "BW"}}])"),
      "s.json");
  const Filter& filter = spec_of<RecomputeDirective>(s, 0).filter;
  EXPECT_TRUE(matches(filter, {{"PP", 0}}, 7, "BW"));
  EXPECT_FALSE(matches(filter, {{"PP", 0}}, 7, "BI"));
  EXPECT_FALSE(matches(filter, {{"PP", 1}}, 7, "BW"));
}

// split's dim_name names the microbatch index in filters, beside "MB".
TEST(StrategyFilter, SplitDimNameSelectsMicrobatches) {
  const Strategy s = parse_strategy(with_directives(R"([
    {"op": "split", "dim_name": "chunk", "num_microbatches": 2},
    {"op": "recompute", "filter": {"chunk": 1, "PASS": "F"}},
    {"op": "order", "filters": [[{"chunk": 0}], [{"MB": 1}, {"chunk": "*"}]]}
  ])"),
                                    "s.json");
  const Filter& filter = spec_of<RecomputeDirective>(s, 1).filter;
  EXPECT_EQ(filter, (Filter{.tags = {{"MB", 1}}, .pass = "F"}));
  EXPECT_TRUE(matches(filter, {}, 1, "F"));
  EXPECT_FALSE(matches(filter, {}, 0, "F"));
  const auto& groups = spec_of<OrderDirective>(s, 2).filters;
  EXPECT_EQ(groups[0][0], (Filter{.tags = {{"MB", 0}}, .pass = std::nullopt}));
  EXPECT_EQ(groups[1][1], (Filter{.tags = {{"MB", std::nullopt}}, .pass = std::nullopt}));
  EXPECT_EQ(parse_strategy(to_json(s).dump(), "s.json"), s);
}

TEST(StrategyGlob, MatchesOnnxNodeNames) {
  EXPECT_TRUE(glob_match("/blocks.1/*", "/blocks.1/attn/MatMul"));
  EXPECT_TRUE(glob_match("/blocks.1/*", "/blocks.1/MatMul"));
  EXPECT_FALSE(glob_match("/blocks.1/*", "/blocks.10/MatMul_extra")) << "'.1/' is literal";
  EXPECT_FALSE(glob_match("/blocks.1/*", "/blocks.2/attn/MatMul"));
  EXPECT_TRUE(glob_match("/blocks.[0-3]/*", "/blocks.3/mlp/Gemm"));
  EXPECT_FALSE(glob_match("/blocks.[0-3]/*", "/blocks.4/mlp/Gemm"));
  EXPECT_TRUE(glob_match("/blocks.?/*", "/blocks.7/x"));
  EXPECT_FALSE(glob_match("/blocks.?/*", "/blocks.17/x"));
  EXPECT_TRUE(glob_match("*", ".hidden/path"));
  EXPECT_TRUE(glob_match("*MatMul", "/head/MatMul"));
  EXPECT_FALSE(glob_match("MatMul", "/head/MatMul")) << "the whole name must match";
  EXPECT_TRUE(glob_match("blocks.*.weight", "blocks.0.q.weight"));
  EXPECT_TRUE(glob_match("a\\*", "a*"));
  EXPECT_FALSE(glob_match("a\\*", "ab"));
}

TEST(StrategyJson, RoundTripsThroughToJson) {
  const Strategy s = parse_strategy(kFull, "full.json");
  const json written = to_json(s);
  EXPECT_EQ(parse_strategy(written.dump(2), "full.json"), s);
  // Writing is stable: the expanded form is a fixed point.
  EXPECT_EQ(to_json(parse_strategy(written.dump(), "full.json")), written);
  EXPECT_EQ(written.at("optimizer"), json::parse(R"({"type": "adamw", "lr": 0.0003,
      "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.1,
      "lr_schedule": {"type": "constant", "warmup_steps": 0, "min_lr_ratio": 0}})"));
  EXPECT_EQ(to_json(s.directives[4]), json::parse(R"({"op": "order", "device": 1,
      "filters": [[{"MB": 0, "PASS": "F"}], [{"MB": 1, "PASS": "BI"}, {"MB": 0}]]})"));

  const Strategy defaults = parse_strategy(R"({"batch": {"global": 2},
      "directives": [{"op": "replicate", "devices": [0, 1], "shard_params": true}]})",
                                           "d.json");
  EXPECT_EQ(parse_strategy(to_json(defaults).dump(), "d.json"), defaults);
  EXPECT_EQ(to_json(defaults.directives[0]), json::parse(R"({"op": "replicate", "filter": {},
      "devices": [0, 1], "bucket_size": 26214400, "shard_optimizer": true, "shard_grads": true,
      "shard_params": true, "gather_stream": "dp_gather", "reduce_stream": "dp_reduce"})"));
  EXPECT_EQ(to_json(defaults).at("optimizer"), json::parse(R"({"type": "sgd", "lr": 0.01,
      "momentum": 0, "dampening": 0, "nesterov": false, "weight_decay": 0,
      "lr_schedule": {"type": "constant", "warmup_steps": 0, "min_lr_ratio": 0}})"));
}

TEST(StrategyJson, DirectiveKeepsTheObjectAsWritten) {
  const Strategy s = parse_strategy(with_directives(R"([{"op": "place", "devices": [0]}])"), "s");
  EXPECT_EQ(s.directives[0].json, json::parse(R"({"op": "place", "devices": [0]})"));
}

TEST(StrategyFiles, LoadNamesAMissingFile) {
  try {
    load_strategy("/nonexistent/strategy.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/strategy.json"), std::string::npos)
        << e.what();
  }
}

TEST(StrategyFiles, LoadUsesThePathAsSourceName) {
  const std::string path = testing::TempDir() + "/strategy_test_bad.json";
  formats::write_file_atomically(path, R"({"batch": {"global": -1}})");
  try {
    load_strategy(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ": $.batch.global: expected an integer from 1 to 2147483648, got -1");
  }
  std::filesystem::remove(path);
}

TEST(StrategyFiles, SingleDeviceSample) {
  const Strategy s = load_strategy(PIPER_SOURCE_DIR "/samples/strategies/single.json");
  EXPECT_EQ(s.global_batch, 32);
  EXPECT_EQ(s.optimizer.type, "sgd");
  EXPECT_DOUBLE_EQ(s.optimizer.lr, 0.05);
  EXPECT_DOUBLE_EQ(s.optimizer.momentum, 0.9);
  ASSERT_EQ(s.directives.size(), 1u);
  EXPECT_EQ(spec_of<PlaceDirective>(s, 0).devices, std::vector<int64_t>{0});
}

TEST(StrategyFiles, EverySampleParses) {
  int count = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(PIPER_SOURCE_DIR "/samples/strategies")) {
    if (entry.path().extension() != ".json") continue;
    EXPECT_NO_THROW(load_strategy(entry.path().string())) << entry.path();
    ++count;
  }
  EXPECT_GE(count, 1);
}

// The schema is JSON, names the same directives and the same keys per
// directive as the parser, so the two cannot drift apart silently.
TEST(StrategyFiles, SchemaAgreesWithTheParser) {
  const json schema =
      json::parse(formats::read_file(PIPER_SOURCE_DIR "/schemas/strategy.schema.json"));
  EXPECT_EQ(schema.at("$schema"), "https://json-schema.org/draft/2020-12/schema");
  const json& defs = schema.at("$defs");
  EXPECT_EQ(defs.at("directive").at("properties").at("op").at("enum"), json(directive_ops()));
  for (const std::string& op : directive_ops()) {
    std::set<std::string> schema_keys;
    for (const auto& item : defs.at(op).at("properties").items()) schema_keys.insert(item.key());
    const std::vector<std::string>& keys = directive_keys(op);
    EXPECT_EQ(schema_keys, std::set<std::string>(keys.begin(), keys.end())) << op;
    EXPECT_EQ(defs.at(op).at("additionalProperties"), false) << op;
  }
  std::set<std::string> top;
  for (const auto& item : schema.at("properties").items()) top.insert(item.key());
  EXPECT_EQ(top, (std::set<std::string>{"$schema", "batch", "optimizer", "precision", "frozen",
                                        "annotations", "mesh", "directives"}));
  EXPECT_THROW(directive_keys("nope"), Error);
}

}  // namespace
}  // namespace piper::strategy
