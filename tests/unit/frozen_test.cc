// The strategy's "frozen" globs against a model's initializers.
#include "planner/import/frozen.h"

#include <gmock/gmock.h>

#include "formats/error.h"
#include "onnx_builder.h"

namespace piper::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

onnx::ModelProto model_with_initializers() {
  testing::OnnxBuilder b;
  b.initializer("h.0.attn.c_attn.bias", {2}, {0, 0});
  b.initializer("h.0.attn.mask", {2}, {1, 0});
  b.initializer("h.1.attn.mask", {2}, {1, 0});
  b.initializer("wte.weight", {2}, {1, 1});
  return b.model();
}

TEST(Frozen, EachGlobReportsWhatItFreezesInModelOrder) {
  const auto matches =
      match_frozen(model_with_initializers(), {"*attn.mask", "wte.*", "*.0.*"}, "s.json");
  ASSERT_EQ(matches.size(), 3u);
  EXPECT_EQ(matches[0].glob, "*attn.mask");
  EXPECT_THAT(matches[0].initializers, ElementsAre("h.0.attn.mask", "h.1.attn.mask"));
  EXPECT_THAT(matches[1].initializers, ElementsAre("wte.weight"));
  EXPECT_THAT(matches[2].initializers, ElementsAre("h.0.attn.c_attn.bias", "h.0.attn.mask"));
  EXPECT_TRUE(match_frozen(model_with_initializers(), {}, "s.json").empty());
}

TEST(Frozen, AGlobMatchingNothingIsAnErrorAtItsJsonPath) {
  try {
    match_frozen(model_with_initializers(), {"*mask", "embed.*"}, "s.json");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("s.json: $.frozen[1]: 'embed.*' matches no initializer; "
                                        "initializer names look like 'h.0.attn.c_attn.bias'"));
    EXPECT_THAT(error.what(), HasSubstr("piper-plan --list"));
  }
}

}  // namespace
}  // namespace piper::planner
