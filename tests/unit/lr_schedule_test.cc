// Learning-rate schedules and gradient clipping in the strategy: f(s) against the issue's
// formula worked out by hand at chosen steps, $.optimizer.lr_schedule and clip_grad_norm parsed
// with their defaults, every validation error naming its JSON path, the to_json round trip and
// the plan's copy.
#include "formats/lr_schedule.h"

#include <gmock/gmock.h>

#include <cmath>
#include <numbers>

#include "formats/strategy.h"
#include "tests/unit/strategy_test_util.h"

namespace piper::formats {
namespace {

using ::testing::HasSubstr;

TEST(LrFactor, WarmsUpLinearlyThenHoldsForConstant) {
  const LrSchedule s{.type = "constant", .warmup_steps = 4};
  EXPECT_DOUBLE_EQ(lr_factor(s, 0), 0.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 1), 0.25);
  EXPECT_DOUBLE_EQ(lr_factor(s, 3), 0.75);
  EXPECT_DOUBLE_EQ(lr_factor(s, 4), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 1000), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(LrSchedule{}, 0), 1.0);  // the default: lr throughout
}

// W = 2, T = 10, r = 0.1: at s = 4, p = 2/8; at s = 6, p = 1/2; from s = 10 on, p = 1.
TEST(LrFactor, LinearAndCosineDecayToTheFloor) {
  const LrSchedule linear{
      .type = "linear", .warmup_steps = 2, .total_steps = 10, .min_lr_ratio = 0.1};
  LrSchedule cosine = linear;
  cosine.type = "cosine";
  for (const LrSchedule& s : {linear, cosine}) {
    EXPECT_DOUBLE_EQ(lr_factor(s, 0), 0.0) << s.type;
    EXPECT_DOUBLE_EQ(lr_factor(s, 1), 0.5) << s.type;
    EXPECT_DOUBLE_EQ(lr_factor(s, 2), 1.0) << s.type;
    EXPECT_NEAR(lr_factor(s, 6), 0.55, 1e-15) << s.type;  // halfway, both
    EXPECT_NEAR(lr_factor(s, 10), 0.1, 1e-15) << s.type;
    EXPECT_NEAR(lr_factor(s, 50), 0.1, 1e-15) << s.type;  // p stays 1 past T
  }
  EXPECT_NEAR(lr_factor(linear, 4), 0.1 + 0.9 * 0.75, 1e-15);
  EXPECT_NEAR(lr_factor(cosine, 4), 0.1 + 0.9 * 0.5 * (1 + std::sqrt(0.5)), 1e-15);
}

// T = W: max(1, T − W) keeps p finite; the step after warm-up is at the floor.
TEST(LrFactor, WarmupAsLongAsTheRun) {
  const LrSchedule s{.type = "cosine", .warmup_steps = 3, .total_steps = 3, .min_lr_ratio = 0};
  EXPECT_NEAR(lr_factor(s, 2), 2.0 / 3.0, 1e-15);
  EXPECT_DOUBLE_EQ(lr_factor(s, 3), 1.0);
  EXPECT_NEAR(lr_factor(s, 4), 0.0, 1e-15);
}

TEST(LrSchedulePlan, RoundTripsThroughPlanOptimizer) {
  const LrSchedule s{.type = "linear", .warmup_steps = 5, .total_steps = 50, .min_lr_ratio = 0.25};
  plan::Optimizer optimizer;
  EXPECT_EQ(lr_schedule_of(optimizer), LrSchedule{});  // older plans: constant
  optimizer.set_lr(0.2);
  set_lr_schedule(s, optimizer);
  EXPECT_EQ(lr_schedule_of(optimizer), s);
  EXPECT_DOUBLE_EQ(scheduled_lr(optimizer, 1), 0.2 * 0.2);
}

}  // namespace
}  // namespace piper::formats

namespace piper::strategy {
namespace {

using ::testing::HasSubstr;

std::string with_optimizer(const std::string& optimizer) {
  return R"({"batch": {"global": 8}, "optimizer": )" + optimizer + "}";
}

TEST(StrategyOptimizerRecipe, ParsesScheduleAndClipping) {
  const Optimizer opt = parse_strategy(with_optimizer(R"({"type": "adamw", "lr": 3e-4,
      "lr_schedule": {"type": "cosine", "warmup_steps": 10, "total_steps": 100,
                      "min_lr_ratio": 0.1},
      "clip_grad_norm": 1.0})"),
                                       "s.json")
                            .optimizer;
  EXPECT_EQ(opt.lr_schedule,
            (formats::LrSchedule{
                .type = "cosine", .warmup_steps = 10, .total_steps = 100, .min_lr_ratio = 0.1}));
  EXPECT_DOUBLE_EQ(opt.clip_grad_norm, 1.0);

  const Optimizer sgd = parse_strategy(with_optimizer(R"({"type": "sgd",
      "lr_schedule": {"type": "constant", "warmup_steps": 3}})"),
                                       "s.json")
                            .optimizer;
  EXPECT_EQ(sgd.lr_schedule,
            (formats::LrSchedule{.type = "constant", .warmup_steps = 3, .total_steps = 0}));
  EXPECT_EQ(sgd.clip_grad_norm, 0.0);  // no clipping by default
  const Optimizer plain = parse_strategy(with_optimizer(R"({"type": "sgd"})"), "s.json").optimizer;
  EXPECT_EQ(plain.lr_schedule, formats::LrSchedule{});
}

TEST(StrategyOptimizerRecipe, RoundTripsThroughToJson) {
  const Strategy s = parse_strategy(with_optimizer(R"({"type": "sgd", "momentum": 0.9,
      "lr_schedule": {"type": "linear", "total_steps": 20}, "clip_grad_norm": 0.5})"),
                                    "s.json");
  const nlohmann::json written = to_json(s);
  EXPECT_EQ(written.at("optimizer").at("lr_schedule"),
            nlohmann::json::parse(
                R"({"type": "linear", "warmup_steps": 0, "total_steps": 20, "min_lr_ratio": 0})"));
  EXPECT_EQ(written.at("optimizer").at("clip_grad_norm"), 0.5);
  EXPECT_EQ(parse_strategy(written.dump(), "s.json"), s);
  const Strategy plain = parse_strategy(with_optimizer(R"({"type": "adamw"})"), "s.json");
  EXPECT_FALSE(to_json(plain).at("optimizer").contains("clip_grad_norm"));
  EXPECT_EQ(parse_strategy(to_json(plain).dump(), "s.json"), plain);
}

struct RecipeError {
  const char* name;
  std::string optimizer;
  std::string message;
};

void PrintTo(const RecipeError& e, std::ostream* out) { *out << e.name; }

class StrategyOptimizerRecipeErrors : public ::testing::TestWithParam<RecipeError> {};

TEST_P(StrategyOptimizerRecipeErrors, NamesThePathAndWhatToDo) {
  EXPECT_THAT(error_of(with_optimizer(GetParam().optimizer)),
              HasSubstr("strategy.json: " + GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    All, StrategyOptimizerRecipeErrors,
    ::testing::Values(
        RecipeError{"UnknownType", R"({"type": "adamw", "lr_schedule": {"type": "exponential"}})",
                    "$.optimizer.lr_schedule.type: expected one of \"constant\", \"linear\", "
                    "\"cosine\", got \"exponential\""},
        RecipeError{"MissingType", R"({"type": "adamw", "lr_schedule": {"warmup_steps": 2}})",
                    "$.optimizer.lr_schedule: missing required key \"type\""},
        RecipeError{"TotalStepsRequired",
                    R"({"type": "adamw", "lr_schedule": {"type": "cosine", "warmup_steps": 2}})",
                    "$.optimizer.lr_schedule.total_steps: required for type \"cosine\": give the "
                    "step the decay ends at (>= 1)"},
        RecipeError{"WarmupBeyondTotal",
                    R"({"type": "sgd", "lr_schedule": {"type": "linear", "warmup_steps": 12,
                        "total_steps": 10}})",
                    "$.optimizer.lr_schedule.warmup_steps: 12 exceeds total_steps 10; warm up "
                    "for at most total_steps steps"},
        RecipeError{"NegativeWarmup",
                    R"({"type": "sgd", "lr_schedule": {"type": "constant", "warmup_steps": -1}})",
                    "$.optimizer.lr_schedule.warmup_steps: expected an integer"},
        RecipeError{"ZeroTotal",
                    R"({"type": "sgd", "lr_schedule": {"type": "linear", "total_steps": 0}})",
                    "$.optimizer.lr_schedule.total_steps: expected a positive integer, got 0"},
        RecipeError{"RatioAboveOne",
                    R"({"type": "adamw", "lr_schedule": {"type": "cosine", "total_steps": 5,
                        "min_lr_ratio": 1.5}})",
                    "$.optimizer.lr_schedule.min_lr_ratio: expected a number in [0, 1], got 1.5"},
        RecipeError{"UnknownKey",
                    R"({"type": "adamw", "lr_schedule": {"type": "cosine", "total_steps": 5,
                        "warmup": 1}})",
                    "$.optimizer.lr_schedule.warmup: unknown key; expected one of type, "
                    "warmup_steps, total_steps, min_lr_ratio"},
        RecipeError{"NotAnObject", R"({"type": "adamw", "lr_schedule": "cosine"})",
                    "$.optimizer.lr_schedule: expected an object"},
        RecipeError{"ClipZero", R"({"type": "adamw", "clip_grad_norm": 0})",
                    "$.optimizer.clip_grad_norm: expected a number > 0, got 0"},
        RecipeError{"ClipString", R"({"type": "sgd", "clip_grad_norm": "1"})",
                    "$.optimizer.clip_grad_norm: expected a number > 0"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace piper::strategy
