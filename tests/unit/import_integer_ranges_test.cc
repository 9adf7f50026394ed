// Import gives integer batch inputs that index something the range synthetic data draws from
// (ir::Tensor::int_high), following them through ops that keep their values: a GPT's targets
// reach the loss through a Reshape, a Hugging Face causal LM's labels through Slice and Reshape.
#include <gtest/gtest.h>

#include "onnx_builder.h"
#include "planner/import/import.h"

namespace piper::planner {
namespace {

using testing::OnnxBuilder;

int64_t int_high(const ir::OpGraph& graph, const std::string& input) {
  for (ir::TensorId id : graph.inputs) {
    if (graph.tensor(id).name == input) return graph.tensor(id).int_high;
  }
  ADD_FAILURE() << "no input " << input;
  return -1;
}

TEST(ImportIntegerRanges, AGptsTokensAndTargetsSpanItsVocabulary) {
  const std::string path = PIPER_SOURCE_DIR "/samples/gpt/model.onnx";
  const ir::OpGraph graph = import_model(load_model_for_import(path), {.batch = 2}, path);
  const int64_t vocab = int_high(graph, "idx");
  EXPECT_GT(vocab, 1);
  EXPECT_EQ(int_high(graph, "targets"), vocab);
}

// ids [B, 5] -> rows of a [16, 7] table, the logits; labels [B, 5] shifted by one as HF's
// causal LMs do (logits[:, :-1], labels[:, 1:], both flattened); `offset` [B] is summed into
// the loss, indexing nothing.
onnx::ModelProto shifted_labels_model() {
  OnnxBuilder b;
  b.input("ids", {-1, 5}, onnx::TensorProto::INT64)
      .input("labels", {-1, 5}, onnx::TensorProto::INT64)
      .input("offset", {-1}, onnx::TensorProto::INT64)
      .output("loss", {})
      .initializer("table", {16, 7}, std::vector<float>(16 * 7, 0.25f))
      .int_initializer("zero", {1}, {0})
      .int_initializer("one", {1}, {1})
      .int_initializer("four", {1}, {4})
      .int_initializer("five", {1}, {5})
      .int_initializer("flat_logits", {2}, {-1, 7})
      .int_initializer("flat", {1}, {-1});
  b.node("Gather", {"table", "ids"}, {"logits"});
  b.node("Slice", {"logits", "zero", "four", "one"}, {"head"});
  b.node("Reshape", {"head", "flat_logits"}, {"scores"});
  b.node("Slice", {"labels", "one", "five", "one"}, {"tail"});
  b.node("Reshape", {"tail", "flat"}, {"targets"});
  b.node("SoftmaxCrossEntropyLoss", {"scores", "targets"}, {"cross_entropy"});
  OnnxBuilder::attr(b.node("Cast", {"offset"}, {"offset_float"}), "to",
                    int64_t{onnx::TensorProto::FLOAT});
  b.node("ReduceSum", {"offset_float"}, {"offset_sum"});
  b.node("Add", {"cross_entropy", "offset_sum"}, {"loss"});
  return b.model();
}

TEST(ImportIntegerRanges, ShiftedLabelsSpanTheClassesAndOtherIntegersStayUnbounded) {
  const ir::OpGraph graph = import_model(shifted_labels_model(), {.batch = 2}, "m.onnx");
  EXPECT_EQ(int_high(graph, "ids"), 16);
  EXPECT_EQ(int_high(graph, "labels"), 7);
  EXPECT_EQ(int_high(graph, "offset"), 0);
}

}  // namespace
}  // namespace piper::planner
