// Gradient rules, one family per file, gathered into one table.
#pragma once

#include <map>
#include <string>

#include "planner/autodiff/gradient_builder.h"

namespace piper::planner {

// Reads the output gradients from the builder and contributes input gradients.
using GradientRule = void (*)(GradientBuilder&);
using GradientRules = std::map<std::string, GradientRule>;

// The rule of ops without a gradient (integer outputs such as ArgMax's, index and
// shape inputs): registering it lets the planner accept the op. It contributes
// nothing, and throws naming the node if a float input actually wants a gradient.
void no_gradient(GradientBuilder& g);

void add_linear_algebra_rules(GradientRules& rules);
void add_elementwise_rules(GradientRules& rules);
void add_shape_rules(GradientRules& rules);
void add_reduction_rules(GradientRules& rules);
void add_loss_rules(GradientRules& rules);
void add_indexing_rules(GradientRules& rules);  // indexing.cc
void add_layout_rules(GradientRules& rules);    // layout.cc
void add_einsum_rules(GradientRules& rules);    // einsum.cc

void add_math_rules(GradientRules& rules);           // math.cc
void add_normalization_rules(GradientRules& rules);  // normalization.cc
void add_dropout_rules(GradientRules& rules);        // dropout.cc
void add_logical_rules(GradientRules& rules);        // logical.cc
void add_fused_rules(GradientRules& rules);          // fused.cc (ops of planner/fusion)

const GradientRules& gradient_rules();

}  // namespace piper::planner
