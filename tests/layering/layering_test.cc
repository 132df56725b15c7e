// The layering rule, checked on the source tree (SPOTDNN_SOURCE_DIR): the domain folders
// (predictor/, profiler/, provisioner/, detector/, base/) include no gRPC or protobuf headers and
// nothing from services/; what they all share (the database layer, the request limits, the
// metrics registry) lives in base/. A violation fails naming the file, the line and the include.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace spotdnn {
namespace {

namespace fs = std::filesystem;

// The domain folders, relative to the source root (base/ may not exist yet).
constexpr const char* kDomainFolders[] = {"predictor", "profiler", "provisioner", "detector",
                                          "base"};

// gRPC and protobuf stay at the services/ edge.
bool IsRpcHeader(const std::string& path) {
  return absl::StartsWith(path, "grpc/") || absl::StartsWith(path, "grpcpp/") ||
         absl::StartsWith(path, "grpc++/") || absl::StartsWith(path, "google/protobuf/") ||
         absl::EndsWith(path, ".pb.h") || absl::StartsWith(path, "spotdnn/v1/");
}

bool IsSource(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".h" || ext == ".cc" || ext == ".hpp" || ext == ".cpp";
}

// "FILE:LINE: #include ..." for each include of `file` (relative `name`) the rule refuses.
std::vector<std::string> Violations(const fs::path& file, const std::string& name) {
  static const std::regex kInclude(R"(^\s*#\s*include\s*["<]([^">]+)[">])");
  std::vector<std::string> out;
  std::ifstream in(file);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::smatch m;
    if (!std::regex_search(line, m, kInclude)) continue;
    const std::string path = m[1].str();
    if (absl::StartsWith(path, "services/") || IsRpcHeader(path)) {
      out.push_back(absl::StrCat(name, ":", number, ": ", line));
    }
  }
  return out;
}

// Every violation in the domain folders under `root`, and how many files were read.
std::vector<std::string> ScanDomain(const fs::path& root, int* files) {
  std::vector<std::string> out;
  for (const char* folder : kDomainFolders) {
    const fs::path dir = root / folder;
    if (!fs::is_directory(dir)) continue;
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
      if (!e.is_regular_file() || !IsSource(e.path())) continue;
      ++*files;
      const std::string name = fs::relative(e.path(), root).string();
      for (std::string& v : Violations(e.path(), name)) out.push_back(std::move(v));
    }
  }
  return out;
}

TEST(Layering, DomainFoldersTakeNothingFromServices) {
  const fs::path root = SPOTDNN_SOURCE_DIR;
  ASSERT_TRUE(fs::is_directory(root / "predictor")) << "no source tree at " << root;
  int files = 0;
  const std::vector<std::string> violations = ScanDomain(root, &files);
  EXPECT_GT(files, 20) << "the scan read too few files to mean anything";
  EXPECT_TRUE(violations.empty())
      << "domain folders include nothing from services/ (what they share lives in base/) and no "
         "gRPC or protobuf header:\n"
      << absl::StrJoin(violations, "\n");
}

TEST(Layering, TheScanFindsAViolation) {
  // The checker itself: a domain folder in a scratch tree with allowed includes (base/ and the
  // domain folders) and refused ones (services/, even its database layer's old home, and gRPC).
  const fs::path root = fs::path(testing::TempDir()) / "layering_scan";
  fs::remove_all(root);
  fs::create_directories(root / "profiler" / "sub");
  std::ofstream(root / "profiler" / "ok.cc") << "#include \"base/db/database.h\"\n"
                                             << "#include \"base/limits.h\"\n"
                                             << "#include \"predictor/types.h\"\n";
  std::ofstream(root / "profiler" / "old.cc") << "#include \"services/common/db/database.h\"\n"
                                              << "#include \"services/common/limits.h\"\n";
  std::ofstream(root / "profiler" / "sub" / "bad.h") << "// a header\n"
                                                     << "#include \"services/common/server.h\"\n"
                                                     << "#include <grpcpp/grpcpp.h>\n";
  std::ofstream(root / "profiler" / "notes.txt") << "#include \"services/common/server.h\"\n";
  int files = 0;
  std::vector<std::string> violations = ScanDomain(root, &files);
  EXPECT_EQ(files, 3);
  ASSERT_EQ(violations.size(), 4u) << absl::StrJoin(violations, "\n");
  std::sort(violations.begin(), violations.end());
  EXPECT_EQ(violations[0], "profiler/old.cc:1: #include \"services/common/db/database.h\"");
  EXPECT_EQ(violations[1], "profiler/old.cc:2: #include \"services/common/limits.h\"");
  EXPECT_EQ(violations[2], "profiler/sub/bad.h:2: #include \"services/common/server.h\"");
  EXPECT_EQ(violations[3], "profiler/sub/bad.h:3: #include <grpcpp/grpcpp.h>");
  fs::remove_all(root);
}

}  // namespace
}  // namespace spotdnn
