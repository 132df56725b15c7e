#include "base/files.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace spotdnn::base {
namespace {

TEST(FileTailTest, TheLastBytesOrTheWholeFileOrNothing) {
  const std::string path = (std::filesystem::path(::testing::TempDir()) /
                            absl::StrCat("spotdnn-file-tail-", getpid(), ".log"))
                               .string();
  std::ofstream(path) << "first line\nsecond line\nthe end\n";
  EXPECT_EQ(FileTail(path, 8), "the end\n");
  EXPECT_EQ(FileTail(path, 1000), "first line\nsecond line\nthe end\n");
  EXPECT_EQ(FileTail(path, 0), "");
  std::filesystem::remove(path);
  EXPECT_EQ(FileTail(path, 8), "");  // gone: nothing to read
}

}  // namespace
}  // namespace spotdnn::base
