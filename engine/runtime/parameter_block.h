// Tensor-parallel parameter blocks (plan::ParameterBlock): which bytes of an initializer a
// rank's block holds, read out of the initializer's data in one pass, and the initializer
// laid back together from its group's blocks for --save-onnx.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/runtime/tensor.h"
#include "formats/external_data.h"
#include "schemas/plan.pb.h"

namespace piper::engine {

// An initializer's bytes seen as [outer, extent, inner] around the block's dimension, in
// bytes: the block is columns [start, start + size) of each of the `outer` rows of
// `extent` bytes.
struct BlockLayout {
  uint64_t outer = 1;
  uint64_t extent = 0;
  uint64_t start = 0;
  uint64_t size = 0;

  uint64_t bytes() const { return outer * size; }
};

// The layout of the whole initializer of `bytes` bytes as one block (a load without a block).
BlockLayout whole_layout(uint64_t bytes);

// The layout of `block` of an initializer of shape `dims` and `element`-byte elements.
// Throws piper::Error, prefixed by `what`, when dim, start or size lie outside `dims`.
BlockLayout block_layout(const Shape& dims, size_t element, const plan::ParameterBlock& block,
                         const std::string& what);

// `dims` with the block's dimension cut to the block's size (dims already checked).
Shape block_shape(const Shape& dims, const plan::ParameterBlock& block);

// "dim 1 [16, 32)"
std::string block_string(const plan::ParameterBlock& block);

// Reads `count` bytes of the initializer's data from `offset` into `sink`.
using RangeReader =
    std::function<void(uint64_t offset, uint64_t count, const formats::ByteSink& sink)>;

// Hands `sink`, in order, bytes [offset, offset + count) of the block flattened in C order,
// reading the initializer once over the span that holds them (the block's rows are strided in
// it). offset + count must lie within layout.bytes().
void read_block(const BlockLayout& layout, uint64_t offset, uint64_t count, const RangeReader& read,
                const formats::ByteSink& sink);

// The initializer from `gathered`, the blocks of `members` consecutive equal blocks
// concatenated in group order, each laid out as `layout` (a block of the initializer).
std::vector<uint8_t> join_blocks(const std::vector<uint8_t>& gathered, const BlockLayout& layout,
                                 int members);

}  // namespace piper::engine
