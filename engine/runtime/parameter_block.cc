#include "engine/runtime/parameter_block.h"

#include <algorithm>
#include <cstring>

#include "formats/error.h"

namespace piper::engine {

BlockLayout whole_layout(uint64_t bytes) { return BlockLayout{1, bytes, 0, bytes}; }

BlockLayout block_layout(const Shape& dims, size_t element, const plan::ParameterBlock& block,
                         const std::string& what) {
  const int rank = static_cast<int>(dims.size());
  if (block.dim() < 0 || block.dim() >= rank) {
    throw Error(what + ": the plan's block is along dim " + std::to_string(block.dim()) +
                ", but the initializer's shape " + shape_string(dims) + " has " +
                std::to_string(rank) + " dimensions; re-plan for this model");
  }
  const int64_t extent = dims[static_cast<size_t>(block.dim())];
  if (block.start() < 0 || block.size() < 1 || block.start() > extent - block.size()) {
    throw Error(what + ": the plan's block " + block_string(block) + " is not within [0, " +
                std::to_string(extent) + ") of dim " + std::to_string(block.dim()) +
                " of the initializer's shape " + shape_string(dims) + "; re-plan for this model");
  }
  const auto dim = static_cast<size_t>(block.dim());
  const uint64_t inner = static_cast<uint64_t>(product(dims, dim + 1, dims.size())) * element;
  return BlockLayout{
      static_cast<uint64_t>(product(dims, 0, dim)), static_cast<uint64_t>(extent) * inner,
      static_cast<uint64_t>(block.start()) * inner, static_cast<uint64_t>(block.size()) * inner};
}

Shape block_shape(const Shape& dims, const plan::ParameterBlock& block) {
  Shape shape = dims;
  shape[static_cast<size_t>(block.dim())] = block.size();
  return shape;
}

std::string block_string(const plan::ParameterBlock& block) {
  return "dim " + std::to_string(block.dim()) + " [" + std::to_string(block.start()) + ", " +
         std::to_string(block.start() + block.size()) + ")";
}

void read_block(const BlockLayout& layout, uint64_t offset, uint64_t count, const RangeReader& read,
                const formats::ByteSink& sink) {
  if (count == 0) return;
  const uint64_t end = offset + count;
  if (end > layout.bytes()) {
    throw Error("reading bytes [" + std::to_string(offset) + ", " + std::to_string(end) +
                ") of a block of " + std::to_string(layout.bytes()));
  }
  // Where byte `at` of the block lies in the initializer's data.
  const auto source = [&layout](uint64_t at) {
    return at / layout.size * layout.extent + layout.start + at % layout.size;
  };
  const uint64_t first = source(offset);
  uint64_t next = offset;  // the block's next byte to hand over
  uint64_t piece = first;  // where the piece `read` hands over next starts in the data
  read(first, source(end - 1) + 1 - first, [&](const uint8_t* data, size_t bytes) {
    const uint64_t piece_end = piece + bytes;
    while (next < end) {
      const uint64_t from = source(next);
      if (from >= piece_end) break;
      const uint64_t take =
          std::min({layout.size - next % layout.size, piece_end - from, end - next});
      sink(data + (from - piece), static_cast<size_t>(take));
      next += take;
    }
    piece = piece_end;
  });
}

std::vector<uint8_t> join_blocks(const std::vector<uint8_t>& gathered, const BlockLayout& layout,
                                 int members) {
  const auto group = static_cast<uint64_t>(members);
  if (gathered.size() != layout.bytes() * group || layout.extent != layout.size * group) {
    throw Error("joining " + std::to_string(members) + " blocks of " +
                std::to_string(layout.bytes()) + " bytes: " + std::to_string(gathered.size()) +
                " bytes were gathered for rows of " + std::to_string(layout.extent));
  }
  std::vector<uint8_t> whole(gathered.size());
  for (uint64_t member = 0; member < group; ++member) {
    const uint8_t* block = gathered.data() + member * layout.bytes();
    for (uint64_t row = 0; row < layout.outer; ++row) {
      std::memcpy(whole.data() + row * layout.extent + member * layout.size,
                  block + row * layout.size, static_cast<size_t>(layout.size));
    }
  }
  return whole;
}

}  // namespace piper::engine
