// Parameter blocks: read_block hands over exactly the block's bytes (any dimension, start,
// size and sub-range) however the reader cuts the data into pieces, and join_blocks lays a
// group's blocks back into the initializer. The reference cuts element by element.
#include "engine/runtime/parameter_block.h"

#include <gmock/gmock.h>

#include "engine_test_util.h"
#include "formats/error.h"

namespace piper::engine::testing {
namespace {

using ::testing::HasSubstr;

const Shape kDims = {3, 4, 5};
constexpr size_t kElement = 2;

std::vector<uint8_t> Data() {
  std::vector<uint8_t> data(static_cast<size_t>(num_elements(kDims)) * kElement);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 1);
  return data;
}

plan::ParameterBlock Block(int dim, int64_t start, int64_t size) {
  plan::ParameterBlock block;
  block.set_dim(dim);
  block.set_start(start);
  block.set_size(size);
  return block;
}

std::vector<uint8_t> Reference(const std::vector<uint8_t>& data, const plan::ParameterBlock& b) {
  Shape shape = kDims;
  shape[static_cast<size_t>(b.dim())] = b.size();
  std::vector<uint8_t> out;
  for (int64_t i = 0; i < num_elements(shape); ++i) {
    std::vector<int64_t> index = Unravel(i, shape);
    index[static_cast<size_t>(b.dim())] += b.start();
    int64_t flat = 0;
    for (size_t d = 0; d < index.size(); ++d) flat = flat * kDims[d] + index[d];
    out.insert(out.end(), data.begin() + flat * kElement, data.begin() + (flat + 1) * kElement);
  }
  return out;
}

// A reader that hands [offset, offset + count) over in pieces of at most `piece` bytes, each
// copied into one reused buffer followed by junk, as a file is read: a sink that reads past a
// piece gets junk.
RangeReader PiecesOf(const std::vector<uint8_t>& data, size_t piece, uint64_t& read_bytes) {
  return
      [&data, piece, &read_bytes](uint64_t offset, uint64_t count, const formats::ByteSink& sink) {
        EXPECT_LE(offset + count, data.size());
        read_bytes += count;
        std::vector<uint8_t> buffer(piece + data.size());
        for (uint64_t done = 0; done < count; done += piece) {
          const size_t bytes = static_cast<size_t>(std::min<uint64_t>(piece, count - done));
          std::fill(buffer.begin(), buffer.end(), 0xee);
          std::memcpy(buffer.data(), data.data() + offset + done, bytes);
          sink(buffer.data(), bytes);
        }
      };
}

TEST(ParameterBlock, ReadsEveryBlockAndRangeInAnyPieces) {
  const std::vector<uint8_t> data = Data();
  for (int dim = 0; dim < 3; ++dim) {
    const int64_t extent = kDims[static_cast<size_t>(dim)];
    for (int64_t start = 0; start < extent; ++start) {
      for (int64_t size = 1; start + size <= extent; ++size) {
        const plan::ParameterBlock block = Block(dim, start, size);
        const BlockLayout layout = block_layout(kDims, kElement, block, "w");
        const std::vector<uint8_t> expected = Reference(data, block);
        ASSERT_EQ(layout.bytes(), expected.size());
        for (uint64_t offset = 0; offset <= expected.size(); offset += 6) {
          for (uint64_t count :
               {uint64_t{0}, uint64_t{1}, uint64_t{10}, expected.size() - offset}) {
            if (offset + count > expected.size()) continue;
            for (size_t piece : {1, 3, 7, 64, 1024}) {
              std::vector<uint8_t> got;
              uint64_t read_bytes = 0;
              read_block(
                  layout, offset, count, PiecesOf(data, piece, read_bytes),
                  [&](const uint8_t* bytes, size_t n) { got.insert(got.end(), bytes, bytes + n); });
              const std::vector<uint8_t> want(
                  expected.begin() + static_cast<int64_t>(offset),
                  expected.begin() + static_cast<int64_t>(offset + count));
              ASSERT_EQ(got, want) << block_string(block) << " bytes [" << offset << ", "
                                   << offset + count << ") in pieces of " << piece;
              // One pass: no byte of the data is read twice.
              ASSERT_LE(read_bytes, data.size());
            }
          }
        }
      }
    }
  }
}

TEST(ParameterBlock, JoinsAGroupsBlocksAlongTheirDimension) {
  const std::vector<uint8_t> data = Data();
  for (int dim = 0; dim < 3; ++dim) {
    const int64_t extent = kDims[static_cast<size_t>(dim)];
    for (int64_t members = 1; members <= extent; ++members) {
      if (extent % members != 0) continue;
      const int64_t size = extent / members;
      std::vector<uint8_t> gathered;
      BlockLayout layout;
      for (int64_t member = 0; member < members; ++member) {
        const plan::ParameterBlock block = Block(dim, member * size, size);
        layout = block_layout(kDims, kElement, block, "w");
        const std::vector<uint8_t> mine = Reference(data, block);
        gathered.insert(gathered.end(), mine.begin(), mine.end());
      }
      EXPECT_EQ(join_blocks(gathered, layout, static_cast<int>(members)), data)
          << "dim " << dim << " over " << members;
    }
  }
}

TEST(ParameterBlock, TheWholeLayoutIsOneBlock) {
  const std::vector<uint8_t> data = Data();
  std::vector<uint8_t> got;
  uint64_t read_bytes = 0;
  read_block(whole_layout(data.size()), 4, 20, PiecesOf(data, 5, read_bytes),
             [&](const uint8_t* bytes, size_t n) { got.insert(got.end(), bytes, bytes + n); });
  EXPECT_EQ(got, std::vector<uint8_t>(data.begin() + 4, data.begin() + 24));
  EXPECT_EQ(read_bytes, 20u);
}

TEST(ParameterBlock, RefusesBlocksOutsideTheShape) {
  const auto refusal = [](const plan::ParameterBlock& block) {
    try {
      block_layout(kDims, kElement, block, "initializer 'w'");
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string();
  };
  EXPECT_THAT(refusal(Block(3, 0, 1)),
              HasSubstr("initializer 'w': the plan's block is along dim 3, but the initializer's "
                        "shape [3, 4, 5] has 3 dimensions"));
  EXPECT_THAT(refusal(Block(-1, 0, 1)), HasSubstr("along dim -1"));
  EXPECT_THAT(refusal(Block(1, 3, 2)),
              HasSubstr("the plan's block dim 1 [3, 5) is not within [0, 4) of dim 1"));
  EXPECT_THAT(refusal(Block(1, -1, 2)), HasSubstr("block dim 1 [-1, 1) is not within"));
  EXPECT_THAT(refusal(Block(2, 0, 0)), HasSubstr("block dim 2 [0, 0) is not within"));
}

}  // namespace
}  // namespace piper::engine::testing
