#include "profiler/import_roots.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/limits.h"

namespace spotdnn::profiler {
namespace {

namespace fs = std::filesystem;

// True when `path` is `dir` or under it (both lexically normal and absolute).
bool IsWithin(const fs::path& path, const fs::path& dir) {
  auto p = path.begin();
  for (auto d = dir.begin(); d != dir.end(); ++d, ++p) {
    if (d->empty()) continue;  // a trailing separator
    if (p == path.end() || *p != *d) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<ImportRoots> ImportRoots::Create(const std::vector<std::string>& roots,
                                                absl::string_view flag) {
  ImportRoots out;
  for (const std::string& root : roots) {
    const std::string where = absl::StrCat(flag, " = ", limits::Quote(root));
    const fs::path given(root);
    if (!given.is_absolute()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": must be an absolute path"));
    }
    std::error_code ec;
    const fs::path resolved = fs::canonical(given, ec);
    if (ec || !fs::is_directory(resolved, ec)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": not an existing folder"));
    }
    if (resolved == "/" || IsWithin(resolved, "/proc") || IsWithin(resolved, "/sys") ||
        IsWithin(resolved, "/dev")) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": a system folder (", resolved.string(),
                       "); give the folder that holds the training logs to import"));
    }
    std::string normal = given.lexically_normal().string();
    while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
    out.given_.push_back(std::move(normal));
    out.roots_.push_back(resolved.string());
  }
  return out;
}

absl::StatusOr<std::string> ImportRoots::Resolve(absl::string_view path_text) const {
  const std::string where = absl::StrCat("path = ", limits::Quote(path_text));
  const fs::path path{std::string(path_text)};
  if (!path.is_absolute()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": must be an absolute path on the server"));
  }
  for (const fs::path& part : path) {
    if (part == "." || part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": \".\" and \"..\" components are not allowed"));
    }
  }
  if (roots_.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        where,
        ": this server reads no files for imports (it has no --import_root); send the file's "
        "content instead"));
  }
  const fs::path normal = path.lexically_normal();
  for (size_t i = 0; i < roots_.size(); ++i) {
    for (const fs::path& root : {fs::path(roots_[i]), fs::path(given_[i])}) {
      if (!IsWithin(normal, root)) continue;
      const fs::path relative = normal.lexically_relative(root);
      if (relative.empty() || std::any_of(relative.begin(), relative.end(),
                                          [](const fs::path& p) { return p == ".."; })) {
        continue;  // not under this spelling of the root after all
      }
      // Walk down from the root: no component may be a link, every one must exist.
      fs::path at(roots_[i]);
      for (const fs::path& part : relative) {
        if (part.empty() || part == ".") continue;
        at /= part;
        struct stat st {};
        if (lstat(at.c_str(), &st) != 0) {
          return absl::NotFoundError(absl::StrCat(where, ": no such file or folder"));
        }
        if (S_ISLNK(st.st_mode)) {
          return absl::PermissionDeniedError(
              absl::StrCat(where, ": ", limits::Quote(at.lexically_relative(roots_[i]).string()),
                           " under the import root is a symbolic link; links are not followed"));
        }
      }
      return at.string();
    }
  }
  return absl::PermissionDeniedError(absl::StrCat(where, ": outside the server's import roots (",
                                                  absl::StrJoin(given_, ", "),
                                                  "); send the file's content instead"));
}

}  // namespace spotdnn::profiler
