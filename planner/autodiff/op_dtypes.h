// The dtypes Piper's kernels take, per forward op type: the planner refuses at plan time what
// the engine would refuse when it prepares the plan. tests/unit/op_coverage_test.cc prepares a
// CPU kernel for every entry, so the table cannot promise what the engine lacks.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "planner/ir/op_graph.h"

namespace piper::planner {

// The tensor whose dtype selects an op's kernel (input 0 for most ops; Where's input 1, the
// output of ops that make values from shapes) and the dtypes an imported model may give it.
struct OpDtypes {
  bool output = false;
  size_t index = 0;
  std::vector<ir::DType> dtypes;
};

// Every ONNX op type the planner accepts (supported_op_types() without Piper's own ops).
const std::map<std::string, OpDtypes>& op_dtypes();

// Throws piper::Error for the first node whose selecting tensor has a dtype its op's entry
// lacks, naming the node, the op, the tensor, its dtype and the dtypes Piper takes.
// `model_name` prefixes the message.
void check_op_dtypes(const ir::OpGraph& graph, const std::string& model_name);

}  // namespace piper::planner
