// Gradient rules, one family per file, gathered into one table.
#pragma once

#include <map>
#include <string>

#include "planner/autodiff/gradient_builder.h"

namespace piper::planner {

// Reads the output gradients from the builder and contributes input gradients.
using GradientRule = void (*)(GradientBuilder&);
using GradientRules = std::map<std::string, GradientRule>;

void add_linear_algebra_rules(GradientRules& rules);
void add_elementwise_rules(GradientRules& rules);
void add_shape_rules(GradientRules& rules);
void add_reduction_rules(GradientRules& rules);
void add_loss_rules(GradientRules& rules);

const GradientRules& gradient_rules();

}  // namespace piper::planner
