#include "formats/flag_list.h"

#include <gtest/gtest.h>

namespace piper::formats {
namespace {

using Entries = std::vector<std::string>;

TEST(FlagList, SplitsAtEveryCommaKeepingEmptyEntries) {
  EXPECT_EQ(split_commas("idx=0,tgt=1"), (Entries{"idx=0", "tgt=1"}));
  EXPECT_EQ(split_commas("5"), (Entries{"5"}));
  EXPECT_EQ(split_commas(""), (Entries{""}));
  EXPECT_EQ(split_commas("a,,b,"), (Entries{"a", "", "b", ""}));
}

TEST(FlagList, CountsAreDigitsOnlyUpToTheirLength) {
  EXPECT_TRUE(is_count("0", 3));
  EXPECT_TRUE(is_count("123", 3));
  EXPECT_FALSE(is_count("1234", 3));
  EXPECT_FALSE(is_count("", 3));
  EXPECT_FALSE(is_count("-1", 3));
  EXPECT_FALSE(is_count("+1", 3));
  EXPECT_FALSE(is_count("1 ", 3));
}

}  // namespace
}  // namespace piper::formats
