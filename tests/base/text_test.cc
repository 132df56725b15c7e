#include "base/text.h"

#include "gtest/gtest.h"

namespace spotdnn::base {
namespace {

TEST(FormatBytes, PicksTheUnitThatFits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.0 KiB");
  EXPECT_EQ(FormatBytes(4096 + 512), "4.5 KiB");
  EXPECT_EQ(FormatBytes(120 * 1024 + 300), "120 KiB");  // not "0.1 MiB"
  EXPECT_EQ(FormatBytes(10188), "9.9 KiB");
  EXPECT_EQ(FormatBytes(10220), "10 KiB");               // 9.98 would print as "10.0"
  EXPECT_EQ(FormatBytes(1024 * 1024 - 100), "1.0 MiB");  // not "1024 KiB"
  EXPECT_EQ(FormatBytes(uint64_t{3} << 29), "1.5 GiB");
  EXPECT_EQ(FormatBytes(uint64_t{12} << 30), "12 GiB");
  EXPECT_EQ(FormatBytes(UINT64_MAX), "16 EiB");
}

TEST(QuotedValue, QuotesOnce) {
  EXPECT_EQ(QuotedValue("a"), "\"a\"");
  EXPECT_EQ(QuotedValue(""), "\"\"");
  EXPECT_EQ(QuotedValue("\"a\""), "\"a\"");  // a JSON string as written
  EXPECT_EQ(QuotedValue("\"a b\""), "\"a b\"");
  EXPECT_EQ(QuotedValue("\""), "\"\"\"");  // a lone quote is the value, quoted
  EXPECT_EQ(QuotedValue("\"a"), "\"\"a\"");
}

}  // namespace
}  // namespace spotdnn::base
