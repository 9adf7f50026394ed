// Device meshes in strategy files: the row-major geometry, "axis": NAME resolved per
// directive, shard's params, sequence_parallel and device groups, the round trip through
// to_json, and one case per error checking the whole message.
#include <gmock/gmock.h>

#include "formats/strategy.h"
#include "tests/unit/strategy_test_util.h"

namespace piper::strategy {
namespace {

using nlohmann::json;
using Devices = std::vector<int64_t>;
using Groups = std::vector<std::vector<int64_t>>;

const std::vector<MeshAxis> kDpTp = {{"dp", 2}, {"tp", 2}};

TEST(StrategyMeshGeometry, DevicesAreRowMajorLastAxisFastest) {
  EXPECT_EQ(mesh_device_count({}), 1);
  EXPECT_EQ(mesh_device_count(kDpTp), 4);
  EXPECT_EQ(mesh_axis_leaders(kDpTp, 0), (Devices{0, 2}));
  EXPECT_EQ(mesh_axis_leaders(kDpTp, 1), (Devices{0, 1}));
  EXPECT_EQ(mesh_axis_groups(kDpTp, 1), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(mesh_axis_groups(kDpTp, 0), (Groups{{0, 2}, {1, 3}}));
  const std::vector<MeshAxis> tp_dp = {{"tp", 2}, {"dp", 2}};
  EXPECT_EQ(mesh_axis_groups(tp_dp, 0), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(mesh_axis_leaders(tp_dp, 0), (Devices{0, 2}));
}

TEST(StrategyMeshGeometry, ThreeAxesAndAxesOfSizeOne) {
  const std::vector<MeshAxis> mesh = {{"pp", 2}, {"dp", 3}, {"tp", 2}};
  EXPECT_EQ(mesh_device_count(mesh), 12);
  EXPECT_EQ(mesh_axis_leaders(mesh, 0), (Devices{0, 6}));
  EXPECT_EQ(mesh_axis_leaders(mesh, 1), (Devices{0, 2, 4}));
  EXPECT_EQ(mesh_axis_groups(mesh, 1), (Groups{{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}}));
  EXPECT_EQ(mesh_axis_groups(mesh, 2), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}}));
  const std::vector<MeshAxis> one = {{"dp", 1}, {"tp", 4}};
  EXPECT_EQ(mesh_axis_leaders(one, 0), (Devices{0}));
  EXPECT_EQ(mesh_axis_groups(one, 0), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(mesh_axis_groups(one, 1), (Groups{{0, 1, 2, 3}}));
}

TEST(StrategyMesh, AxesKeepTheirOrder) {
  const Strategy s =
      parse_strategy(with_mesh(R"([["tp", 4], ["dp", 2], ["x_1", 1]])", "[]"), "s.json");
  EXPECT_EQ(s.mesh, (std::vector<MeshAxis>{{"tp", 4}, {"dp", 2}, {"x_1", 1}}));
  EXPECT_TRUE(parse_strategy(with_directives("[]"), "s.json").mesh.empty());
}

TEST(StrategyMesh, AxisGivesLeadersToPlaceReplicatePipelineAndZero) {
  const Strategy s = parse_strategy(with_mesh(R"([["dp", 2], ["tp", 2]])", R"([
    {"op": "place", "axis": "dp"},
    {"op": "replicate", "axis": "dp", "shard_grads": true},
    {"op": "zero", "stage": 1, "axis": "tp"},
    {"op": "shard", "axis": "tp", "params": {"w": 0}},
    {"op": "pipeline", "schedule": "1f1b", "axis": "dp", "num_microbatches": 2}
  ])"),
                                    "s.json");
  EXPECT_EQ(spec_of<PlaceDirective>(s, 0).devices, (Devices{0, 2}));
  EXPECT_EQ(spec_of<ReplicateDirective>(s, 1).devices, (Devices{0, 2}));
  EXPECT_EQ(spec_of<ZeroDirective>(s, 2).devices, (Devices{0, 1}));
  EXPECT_EQ(spec_of<PipelineDirective>(s, 4).devices, (Devices{0, 2}));
  EXPECT_EQ(s.directives[0].json.at("axis"), "dp") << "the directive as written";
}

TEST(StrategyMesh, AxisGivesShardOneGroupPerSetDifferingInThatAxis) {
  const Strategy dp_tp = parse_strategy(with_mesh(R"([["dp", 2], ["tp", 2]])", R"([
    {"op": "shard", "axis": "tp", "params": {"w": 0}},
    {"op": "shard", "axis": "dp", "style": "expert", "tag": "EXPERT"}
  ])"),
                                        "s.json");
  EXPECT_EQ(spec_of<ShardDirective>(dp_tp, 0).groups, (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(spec_of<ShardDirective>(dp_tp, 1).groups, (Groups{{0, 2}, {1, 3}}));
  const Strategy tp_dp =
      parse_strategy(with_mesh(R"([["tp", 2], ["dp", 2]])",
                               R"([{"op": "shard", "axis": "tp", "params": {"w": 0}}])"),
                     "s.json");
  EXPECT_EQ(spec_of<ShardDirective>(tp_dp, 0).groups, (Groups{{0, 2}, {1, 3}}));
}

TEST(StrategyMesh, PipelineBesideAShardedAxisOrAnAxisOfSizeOne) {
  const Strategy sharded = parse_strategy(with_mesh(R"([["pp", 2], ["tp", 2]])", R"([
    {"op": "pipeline", "schedule": "gpipe", "axis": "pp", "num_microbatches": 2},
    {"op": "shard", "axis": "tp", "params": {"*.weight": 0}}
  ])"),
                                          "s.json");
  EXPECT_EQ(spec_of<PipelineDirective>(sharded, 0).devices, (Devices{0, 2}));
  const Strategy lone = parse_strategy(
      with_mesh(
          R"([["dp", 1], ["pp", 4]])",
          R"([{"op": "pipeline", "schedule": "gpipe", "axis": "pp", "num_microbatches": 4}])"),
      "s.json");
  EXPECT_EQ(spec_of<PipelineDirective>(lone, 0).devices, (Devices{0, 1, 2, 3}));
}

TEST(StrategyMeshGeometry, ReplicasDifferOnlyAlongTheGivenAxesRowMajor) {
  const std::vector<MeshAxis> dp_pp = {{"dp", 2}, {"pp", 2}};
  EXPECT_EQ(mesh_replicas(dp_pp, 0, {0}), (Devices{0, 2}));
  EXPECT_EQ(mesh_replicas(dp_pp, 1, {0}), (Devices{1, 3}));
  EXPECT_EQ(mesh_replicas(dp_pp, 3, {0}), (Devices{1, 3}));
  EXPECT_EQ(mesh_replicas(dp_pp, 1, {}), (Devices{1}));
  const std::vector<MeshAxis> mesh = {{"a", 2}, {"pp", 2}, {"b", 2}};
  EXPECT_EQ(mesh_replicas(mesh, 2, {0, 2}), (Devices{2, 3, 6, 7}));
}

// The other axes of size > 1 that no shard splits over replicate the whole pipeline: stage s
// on the pp leader, replicated over the devices that differ from it only along those axes.
TEST(StrategyMeshPipeline, OtherAxesReplicateEachStage) {
  const Strategy dp_pp = parse_strategy(with_mesh(R"([["dp", 2], ["pp", 2]])", R"([
    {"op": "pipeline", "schedule": "1f1b", "axis": "pp", "num_microbatches": 4, "zero": 1,
     "bucket_size": 1024}
  ])"),
                                        "s.json");
  const auto& pipeline = spec_of<PipelineDirective>(dp_pp, 0);
  EXPECT_EQ(pipeline.devices, (Devices{0, 1}));
  EXPECT_EQ(pipeline.replicas, (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(pipeline.zero, 1);
  EXPECT_EQ(pipeline.bucket_size, 1024);
  const Strategy dp_pp_tp = parse_strategy(with_mesh(R"([["dp", 2], ["pp", 2], ["tp", 2]])", R"([
    {"op": "pipeline", "schedule": "gpipe", "axis": "pp", "num_microbatches": 2},
    {"op": "shard", "axis": "tp", "params": {"w": 0}}
  ])"),
                                           "s.json");
  EXPECT_EQ(spec_of<PipelineDirective>(dp_pp_tp, 0).devices, (Devices{0, 2}));
  EXPECT_EQ(spec_of<PipelineDirective>(dp_pp_tp, 0).replicas, (Groups{{0, 4}, {2, 6}}));
  EXPECT_EQ(spec_of<PipelineDirective>(dp_pp_tp, 0).zero, 0);
  const Strategy two = parse_strategy(with_mesh(R"([["a", 2], ["pp", 2], ["b", 2]])", R"([
    {"op": "pipeline", "schedule": "gpipe", "axis": "pp", "num_microbatches": 2, "zero": 3}
  ])"),
                                      "s.json");
  EXPECT_EQ(spec_of<PipelineDirective>(two, 0).replicas, (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
}

// A shard over flat groups that are a mesh axis' groups splits over that axis, as "axis" does.
TEST(StrategyMeshPipeline, AShardsAxisIsTensorParallelHoweverItIsWritten) {
  const Strategy s = parse_strategy(with_mesh(R"([["pp", 2], ["tp", 2]])", R"([
    {"op": "pipeline", "schedule": "gpipe", "axis": "pp", "num_microbatches": 2},
    {"op": "shard", "devices": [[0, 1], [2, 3]], "params": {"w": 0}}
  ])"),
                                    "s.json");
  EXPECT_TRUE(spec_of<PipelineDirective>(s, 0).replicas.empty());
}

// Expert parallelism over the replicas: "replica_axes" names dp, which the shard splits too,
// so the shard's groups are the stages' replica sets.
TEST(StrategyMeshPipeline, ReplicaAxesNameTheReplicatingAxes) {
  const Strategy s = parse_strategy(with_mesh(R"([["pp", 2], ["dp", 2]])", R"([
    {"op": "pipeline", "schedule": "1f1b", "axis": "pp", "num_microbatches": 2, "zero": 2,
     "replica_axes": ["dp"]},
    {"op": "shard", "axis": "dp", "params": {"w": 0}}
  ])"),
                                    "s.json");
  EXPECT_EQ(spec_of<PipelineDirective>(s, 0).replicas, (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(spec_of<ShardDirective>(s, 1).groups, (Groups{{0, 1}, {2, 3}}));
}

TEST(StrategyMeshPipeline, FlatReplicasAndTheirRoundTrip) {
  const Strategy s = parse_strategy(with_directives(R"([
    {"op": "pipeline", "schedule": "1f1b", "devices": [0, 1], "replicas": [[2, 0], [1, 3]],
     "num_microbatches": 4, "zero": 2}
  ])"),
                                    "s.json");
  EXPECT_EQ(spec_of<PipelineDirective>(s, 0).replicas, (Groups{{2, 0}, {1, 3}}));
  EXPECT_EQ(to_json(s.directives[0]), json::parse(R"({"op": "pipeline", "schedule": "1f1b",
      "tag": "PP", "devices": [0, 1], "replicas": [[2, 0], [1, 3]], "num_microbatches": 4,
      "chunks": 1, "zero": 2})"));
  EXPECT_EQ(parse_strategy(to_json(s).dump(), "s.json"), s);
  const Strategy mesh = parse_strategy(with_mesh(R"([["dp", 2], ["pp", 2], ["tp", 2]])", R"([
    {"op": "pipeline", "schedule": "gpipe", "axis": "pp", "num_microbatches": 2, "zero": 1},
    {"op": "shard", "axis": "tp", "params": {"w": 0}}
  ])"),
                                       "s.json");
  EXPECT_EQ(parse_strategy(to_json(mesh).dump(), "s.json"), mesh);
}

TEST(StrategyShard, ParamsSequenceParallelAndGroups) {
  const Strategy s = parse_strategy(with_directives(R"([
    {"op": "shard", "filter": {"LAYER": "*"}, "devices": [[0, 1], [2, 3]],
     "params": {"blocks.*.attn.q.weight": 0, "blocks.*.attn.o.weight": 1},
     "sequence_parallel": true, "stream": "tp"},
    {"op": "shard", "devices": [[4, 5]], "params": {"w": 0}, "sequence_parallel": false},
    {"op": "shard", "devices": [6, 7], "params": {"w": 1}}
  ])"),
                                    "s.json");
  ShardDirective first;
  first.filter.tags = {{"LAYER", std::nullopt}};
  first.params = {{"blocks.*.attn.q.weight", 0}, {"blocks.*.attn.o.weight", 1}};
  first.groups = {{0, 1}, {2, 3}};
  first.sequence_parallel = true;
  first.stream = "tp";
  EXPECT_EQ(spec_of<ShardDirective>(s, 0), first);
  EXPECT_EQ(spec_of<ShardDirective>(s, 1).groups, (Groups{{4, 5}}));
  EXPECT_FALSE(spec_of<ShardDirective>(s, 1).sequence_parallel);
  EXPECT_EQ(spec_of<ShardDirective>(s, 2).groups, (Groups{{6, 7}}));
  EXPECT_EQ(spec_of<ShardDirective>(s, 2).params, (std::map<std::string, int64_t>{{"w", 1}}));
}

TEST(StrategyMeshJson, WritesTheMeshAndResolvedDevicesAndRoundTrips) {
  const Strategy s = parse_strategy(with_mesh(R"([["dp", 2], ["tp", 2]])", R"([
    {"op": "shard", "axis": "tp", "params": {"w": 0}, "sequence_parallel": true},
    {"op": "shard", "devices": [[0, 1]], "style": "expert", "tag": "E"},
    {"op": "zero", "stage": 3, "axis": "dp"},
    {"op": "order", "filters": [[{}]], "device": 3}
  ])"),
                                    "s.json");
  const json written = to_json(s);
  EXPECT_EQ(written.at("mesh"), json::parse(R"([["dp", 2], ["tp", 2]])"));
  EXPECT_EQ(to_json(s.directives[0]), json::parse(R"({"op": "shard", "filter": {},
      "devices": [[0, 1], [2, 3]], "params": {"w": 0}, "sequence_parallel": true,
      "stream": "compute"})"));
  EXPECT_EQ(to_json(s.directives[1]), json::parse(R"({"op": "shard", "filter": {},
      "devices": [0, 1], "style": "expert", "tag": "E", "stream": "compute"})"));
  EXPECT_EQ(to_json(s.directives[2]),
            json::parse(R"({"op": "zero", "stage": 3, "devices": [0, 2]})"));
  EXPECT_EQ(parse_strategy(written.dump(), "s.json"), s);
  EXPECT_EQ(to_json(parse_strategy(written.dump(), "s.json")), written);
  EXPECT_FALSE(to_json(parse_strategy(with_directives("[]"), "s.json")).contains("mesh"));
}

// A pipeline along "pp" beside a tensor-parallel axis written to_json lists its devices.
TEST(StrategyMeshJson, ResolvedPipelineRoundTrips) {
  const Strategy s = parse_strategy(with_mesh(R"([["pp", 2], ["tp", 2]])", R"([
    {"op": "pipeline", "schedule": "1f1b", "axis": "pp", "num_microbatches": 4},
    {"op": "shard", "axis": "tp", "params": {"w": 0}}
  ])"),
                                    "s.json");
  EXPECT_EQ(parse_strategy(to_json(s).dump(), "s.json"), s);
}

class StrategyMeshErrors : public testing::TestWithParam<ErrorCase> {};

TEST_P(StrategyMeshErrors, MessageNamesFileAndPath) {
  EXPECT_EQ(error_of(GetParam().text), GetParam().message);
}

const std::string kMesh = R"([["dp", 2], ["tp", 2]])";

std::string mesh_only(const std::string& mesh) { return with_mesh(mesh, "[]"); }

INSTANTIATE_TEST_SUITE_P(
    Mesh, StrategyMeshErrors,
    testing::Values(
        ErrorCase{"NotAnArray", mesh_only(R"({"dp": 2})"),
                  "strategy.json: $.mesh: expected an array of [name, size] axes, got {\"dp\":2}"},
        ErrorCase{"Empty", mesh_only("[]"),
                  "strategy.json: $.mesh: expected a non-empty array of [name, size] axes, got []"},
        ErrorCase{"NotAPair", mesh_only(R"([["dp", 2], ["tp"]])"),
                  "strategy.json: $.mesh[1]: expected an axis [name, size], e.g. [\"tp\", 2], got "
                  "[\"tp\"]"},
        ErrorCase{"NameNotAString", mesh_only(R"([[2, 2]])"),
                  "strategy.json: $.mesh[0][0]: expected an axis name (letters, digits and _, not "
                  "starting with a digit), got 2"},
        ErrorCase{"NameNotAnIdentifier", mesh_only(R"([["d-p", 2]])"),
                  "strategy.json: $.mesh[0][0]: expected an axis name (letters, digits and _, not "
                  "starting with a digit), got \"d-p\""},
        ErrorCase{"DuplicateName", mesh_only(R"([["dp", 2], ["tp", 2], ["dp", 1]])"),
                  "strategy.json: $.mesh[2][0]: axis \"dp\" is already $.mesh[0]; axis names are "
                  "unique"},
        ErrorCase{"SizeZero", mesh_only(R"([["dp", 0]])"),
                  "strategy.json: $.mesh[0][1]: expected an integer from 1 to 65536, got 0"},
        ErrorCase{"SizeNotAnInteger", mesh_only(R"([["dp", 1.5]])"),
                  "strategy.json: $.mesh[0][1]: expected an integer from 1 to 65536, got 1.5"},
        ErrorCase{"TooManyDevices", mesh_only(R"([["dp", 256], ["tp", 512]])"),
                  "strategy.json: $.mesh[1][1]: makes a mesh of 131072 devices; Piper takes at "
                  "most 65536"}),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Axis, StrategyMeshErrors,
    testing::Values(
        ErrorCase{"AxisAndDevices",
                  with_mesh(kMesh, R"([{"op": "place", "axis": "dp", "devices": [0]}])"),
                  "strategy.json: $.directives[0].axis: given with \"devices\"; give one of the "
                  "two (\"axis\" names a mesh axis, \"devices\" lists devices)"},
        ErrorCase{"NeitherOnShard", with_mesh(kMesh, R"([{"op": "shard", "params": {"w": 0}}])"),
                  "strategy.json: $.directives[0]: missing required key \"devices\" (or \"axis\", "
                  "a mesh axis)"},
        ErrorCase{"NeitherOnZero", with_mesh(kMesh, R"([{"op": "zero", "stage": 1}])"),
                  "strategy.json: $.directives[0]: missing required key \"devices\" (or \"axis\", "
                  "a mesh axis)"},
        ErrorCase{"NoMesh", with_directives(R"([{"op": "replicate", "axis": "dp"}])"),
                  "strategy.json: $.directives[0].axis: \"dp\" names a mesh axis, but the "
                  "strategy has no \"mesh\"; declare one (\"mesh\": [[\"dp\", 2], ...]) or list "
                  "\"devices\""},
        ErrorCase{"UnknownAxis",
                  with_mesh(kMesh, R"([{"op": "pipeline", "schedule": "gpipe", "axis": "pp",
                                        "num_microbatches": 1}])"),
                  "strategy.json: $.directives[0].axis: unknown mesh axis \"pp\"; the mesh's axes "
                  "are dp, tp"},
        ErrorCase{"AxisNotAString", with_mesh(kMesh, R"([{"op": "place", "axis": 0}])"),
                  "strategy.json: $.directives[0].axis: expected a mesh axis name (string), got 0"},
        ErrorCase{"DeviceOutsideTheMesh",
                  with_mesh(kMesh, R"([{"op": "place", "devices": [0, 4]}])"),
                  "strategy.json: $.directives[0].devices[1]: device 4 is outside the mesh (dp 2 "
                  "x tp 2: devices 0 to 3)"},
        ErrorCase{"GroupDeviceOutsideTheMesh",
                  with_mesh(kMesh, R"([{"op": "shard", "devices": [[0, 1], [2, 7]],
                                        "params": {"w": 0}}])"),
                  "strategy.json: $.directives[0].devices[1][1]: device 7 is outside the mesh "
                  "(dp 2 x tp 2: devices 0 to 3)"},
        ErrorCase{"OrderDeviceOutsideTheMesh",
                  with_mesh(kMesh, R"([{"op": "order", "filters": [[{}]], "device": 4}])"),
                  "strategy.json: $.directives[0].device: device 4 is outside the mesh (dp 2 x tp "
                  "2: devices 0 to 3)"}),
    [](const auto& info) { return info.param.name; });

const std::string kDpPp = R"([["dp", 2], ["pp", 2]])";

std::string pipeline_with(const std::string& keys) {
  return R"({"op": "pipeline", "schedule": "1f1b", "num_microbatches": 2, )" + keys + "}";
}

INSTANTIATE_TEST_SUITE_P(
    Pipeline, StrategyMeshErrors,
    testing::Values(
        ErrorCase{"ZeroWithoutReplicas",
                  with_mesh(R"([["pp", 2], ["tp", 2]])",
                            "[" + pipeline_with(R"("axis": "pp", "zero": 1)") +
                                R"(, {"op": "shard", "axis": "tp", "params": {"w": 0}}])"),
                  "strategy.json: $.directives[0].zero: configures the data parallelism of "
                  "replicated stages, but nothing replicates this pipeline's stages (no other "
                  "mesh axis of size > 1 that no shard splits over; name the replicating axes in "
                  "\"replica_axes\")"},
        ErrorCase{
            "BucketSizeWithoutReplicas",
            with_directives("[" + pipeline_with(R"("devices": [0, 1], "bucket_size": 64)") + "]"),
            "strategy.json: $.directives[0].bucket_size: configures the data parallelism "
            "of replicated stages, but nothing replicates this pipeline's stages (list each "
            "device's replicas in \"replicas\")"},
        ErrorCase{"ZeroOutOfRange",
                  with_mesh(kDpPp, "[" + pipeline_with(R"("axis": "pp", "zero": 4)") + "]"),
                  "strategy.json: $.directives[0].zero: expected an integer from 0 to 3, got 4"},
        ErrorCase{
            "ZeroBesideAReplicatedPipeline",
            with_mesh(kDpPp, "[" + pipeline_with(R"("axis": "pp")") +
                                 R"(, {"op": "zero", "stage": 1, "axis": "dp"}])"),
            "strategy.json: $.directives[1]: a zero directive beside $.directives[0], a "
            "pipeline that replicates its stages over [0, 2] and [1, 3] (one replicate each); "
            "drop this directive and give $.directives[0] \"zero\": 0 to 3 (and "
            "\"bucket_size\") instead"},
        ErrorCase{
            "ReplicateBesideAReplicatedPipeline",
            with_directives("[" +
                            pipeline_with(R"("devices": [0, 1], "replicas": [[0, 2], [1, 3]])") +
                            R"(, {"op": "replicate", "filter": {"PP": 0}, "devices": [0, 2]}])"),
            "strategy.json: $.directives[1]: a replicate directive beside $.directives[0], "
            "a pipeline that replicates its stages over [0, 2] and [1, 3] (one replicate "
            "each); drop this directive and give $.directives[0] \"zero\": 0 to 3 (and "
            "\"bucket_size\") instead"},
        ErrorCase{
            "ReplicaAxesWithDevices",
            with_mesh(kDpPp,
                      "[" + pipeline_with(R"("devices": [0, 1], "replica_axes": ["dp"])") + "]"),
            "strategy.json: $.directives[0].replica_axes: names mesh axes, but the pipeline "
            "lists \"devices\"; give \"axis\" instead, or list each device's replicas in "
            "\"replicas\""},
        ErrorCase{
            "ReplicaAxesNamingThePipelinesAxis",
            with_mesh(kDpPp,
                      "[" + pipeline_with(R"("axis": "pp", "replica_axes": ["dp", "pp"])") + "]"),
            "strategy.json: $.directives[0].replica_axes[1]: \"pp\" is the pipeline's axis "
            "or named twice; name each replicating axis once"},
        ErrorCase{
            "ReplicaAxesUnknown",
            with_mesh(kDpPp, "[" + pipeline_with(R"("axis": "pp", "replica_axes": ["ep"])") + "]"),
            "strategy.json: $.directives[0].replica_axes[0]: unknown mesh axis \"ep\"; the "
            "mesh's axes are dp, pp"},
        ErrorCase{
            "ReplicasWithAxis",
            with_mesh(kDpPp,
                      "[" + pipeline_with(R"("axis": "pp", "replicas": [[0, 2], [1, 3]])") + "]"),
            "strategy.json: $.directives[0].replicas: given with \"axis\"; the mesh gives "
            "the replicas (name their axes in \"replica_axes\" if the default is not what "
            "you mean)"},
        ErrorCase{"ReplicasOnePerDevice",
                  with_directives(
                      "[" + pipeline_with(R"("devices": [0, 1], "replicas": [[0, 2]])") + "]"),
                  "strategy.json: $.directives[0].replicas: expected one device list per device "
                  "of \"devices\" (2), each the devices its stages are replicated over, got "
                  "[[0,2]]"},
        ErrorCase{
            "ReplicasWithoutTheirDevice",
            with_directives(
                "[" + pipeline_with(R"("devices": [0, 1], "replicas": [[0, 2], [3, 4]])") + "]"),
            "strategy.json: $.directives[0].replicas[1]: does not hold device 1 "
            "(\"devices\"[1]), whose stages it replicates"}),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Shard, StrategyMeshErrors,
    testing::Values(
        ErrorCase{"ColumnStyle",
                  with_directives(R"([{"op": "shard", "devices": [0, 1], "style": "column"}])"),
                  "strategy.json: $.directives[0].style: \"column\" is not a shard style; name "
                  "the parameters to split in \"params\" instead, {\"<initializer glob>\": dim}: "
                  "dim 0 for a column split of PyTorch's [out, in] weight, 1 for a row split"},
        ErrorCase{"RowStyle", with_directives(R"([{"op": "shard", "devices": [0, 1], "style": "row",
                                       "params": {"w": 1}}])"),
                  "strategy.json: $.directives[0].style: \"row\" is not a shard style; name the "
                  "parameters to split in \"params\" instead, {\"<initializer glob>\": dim}: dim "
                  "0 for a column split of PyTorch's [out, in] weight, 1 for a row split"},
        ErrorCase{"ParamsAndExpert",
                  with_directives(R"([{"op": "shard", "devices": [0, 1], "style": "expert",
                                       "tag": "E", "params": {"w": 0}}])"),
                  "strategy.json: $.directives[0].style: given with \"params\"; a shard directive "
                  "splits either the parameters \"params\" names or the experts of style "
                  "\"expert\", not both"},
        ErrorCase{"NeitherParamsNorStyle", with_directives(R"([{"op": "shard", "devices": [0]}])"),
                  "strategy.json: $.directives[0]: missing required key \"params\" (initializer "
                  "glob: dimension to split) or \"style\": \"expert\""},
        ErrorCase{"ParamsEmpty",
                  with_directives(R"([{"op": "shard", "devices": [0], "params": {}}])"),
                  "strategy.json: $.directives[0].params: expected a non-empty object of "
                  "initializer glob: dimension to split, e.g. {\"blocks.*.attn.q.weight\": 0}, got "
                  "{}"},
        ErrorCase{"ParamsList",
                  with_directives(R"([{"op": "shard", "devices": [0], "params": ["w"]}])"),
                  "strategy.json: $.directives[0].params: expected a non-empty object of "
                  "initializer glob: dimension to split, e.g. {\"blocks.*.attn.q.weight\": 0}, got "
                  "[\"w\"]"},
        ErrorCase{
            "NegativeDim",
            with_directives(R"([{"op": "shard", "devices": [0], "params": {"blocks.*.w": -1}}])"),
            "strategy.json: $.directives[0].params[\"blocks.*.w\"]: expected an integer >= "
            "0, got -1"},
        ErrorCase{"EmptyGlob",
                  with_directives(R"([{"op": "shard", "devices": [0], "params": {"": 0}}])"),
                  "strategy.json: $.directives[0].params[\"\"]: an empty glob matches no "
                  "initializer"},
        ErrorCase{"SequenceParallelWithExpert",
                  with_directives(R"([{"op": "shard", "devices": [0], "style": "expert",
                                       "tag": "E", "sequence_parallel": true}])"),
                  "strategy.json: $.directives[0].sequence_parallel: only valid with \"params\", "
                  "not with style \"expert\""},
        ErrorCase{"SequenceParallelNotABoolean",
                  with_directives(R"([{"op": "shard", "devices": [0], "params": {"w": 0},
                                       "sequence_parallel": 1}])"),
                  "strategy.json: $.directives[0].sequence_parallel: expected true or false, got "
                  "1"},
        ErrorCase{"GroupsOfDifferentSizes",
                  with_directives(R"([{"op": "shard", "devices": [[0, 1], [2, 3, 4]],
                                       "params": {"w": 0}}])"),
                  "strategy.json: $.directives[0].devices[1]: has 3 devices, but "
                  "$.directives[0].devices[0] has 2; groups are the same size"},
        ErrorCase{"GroupsOverlap", with_directives(R"([{"op": "shard", "devices": [[0, 1], [2, 1]],
                                       "params": {"w": 0}}])"),
                  "strategy.json: $.directives[0].devices[1][1]: device 1 is also in "
                  "$.directives[0].devices[0]; groups are disjoint"},
        ErrorCase{"EmptyGroup",
                  with_directives(R"([{"op": "shard", "devices": [[0], []], "params": {"w": 0}}])"),
                  "strategy.json: $.directives[0].devices[1]: expected a non-empty array of "
                  "distinct device indices in [0, 65536), got []"},
        ErrorCase{"GroupsMixedWithDevices",
                  with_directives(R"([{"op": "shard", "devices": [[0], 1], "params": {"w": 0}}])"),
                  "strategy.json: $.directives[0].devices[1]: expected a non-empty array of "
                  "distinct device indices in [0, 65536), got 1"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace piper::strategy
