// Token windows (piper-run --tokens): a flat binary file of uint16 or uint32 token ids, as
// nanoGPT's prepare scripts write, memory-mapped. Sample g of the global stream (step s, row i:
// g = s * global_batch + i) starts at a position drawn from the seed and g alone, so every
// layout, and a run resumed from a checkpoint, sees the same windows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/data.h"

namespace piper::engine {

enum class TokenDType { kUint16, kUint32 };

// One model input fed from the token file: for sample g, the window of its sequence length
// (the plan's [batch, seq] shape) starting `offset` tokens after sample g's position.
struct TokenInput {
  std::string input;
  int64_t offset = 0;
};

struct TokenOptions {
  std::string path;
  TokenDType dtype = TokenDType::kUint16;
  std::vector<TokenInput> inputs;
};

// "uint16" or "uint32"; throws piper::Error naming --token-dtype otherwise.
TokenDType parse_token_dtype(const std::string& text);
// "idx=0,tgt=1"; throws piper::Error naming --token-inputs and the entry at fault (not
// NAME=OFFSET, a negative offset, an input named twice, none at all).
std::vector<TokenInput> parse_token_inputs(const std::string& text);

// The position of sample g's window in a file of `tokens` tokens whose windows span `span`
// tokens: splitmix64 keyed by (seed, g) modulo tokens - span + 1.
int64_t token_window_start(uint64_t seed, int64_t sample, int64_t tokens, int64_t span);

// Feeds options.inputs from the token file. Throws piper::Error naming the flag and value when
// the file is missing, its size is not a multiple of the dtype's, it is shorter than a window,
// or an input is unknown to the plan or not int64 [batch, seq]; batch() throws when a token id
// is not below the model's vocabulary (the plan's int_high of that input).
std::unique_ptr<BatchSource> make_token_source(const plan::Plan& plan, const TokenOptions& options,
                                               uint64_t seed);

}  // namespace piper::engine
