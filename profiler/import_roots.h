// Which files a profiler server may read when a client asks it to import a path: only those under
// its import roots (--import_root; none by default, so that clients send content instead). A
// client's path must be absolute, without "." or ".." components, and lead to its file or folder
// without passing a symbolic link below the root; files are then opened without following links
// (see FileAccess in importers.h), and only regular files are read.
#ifndef SPOTDNN_PROFILER_IMPORT_ROOTS_H_
#define SPOTDNN_PROFILER_IMPORT_ROOTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spotdnn::profiler {

class ImportRoots {
 public:
  // No roots: every path is refused.
  ImportRoots() = default;

  // Roots from absolute paths of existing folders (symbolic links in a root's own path are
  // resolved once, here). INVALID_ARGUMENT naming `flag` and the root for a relative path, one
  // that is not an existing folder, and "/" or a system folder (/proc, /sys, /dev, or under them).
  static absl::StatusOr<ImportRoots> Create(const std::vector<std::string>& roots,
                                            absl::string_view flag = "--import_root");

  bool empty() const { return roots_.empty(); }
  // The roots, resolved.
  const std::vector<std::string>& roots() const { return roots_; }

  // The file or folder `path` names, resolved under its root. INVALID_ARGUMENT for a relative
  // path or one with a "." or ".." component; PERMISSION_DENIED when it is under no root (or
  // there are none) or a component below its root is a symbolic link; NOT_FOUND when it does not
  // exist. Messages quote the path (never a file's content).
  absl::StatusOr<std::string> Resolve(absl::string_view path) const;

 private:
  std::vector<std::string> given_;  // as configured (lexically normal), parallel to roots_
  std::vector<std::string> roots_;  // resolved
};

}  // namespace spotdnn::profiler

#endif  // SPOTDNN_PROFILER_IMPORT_ROOTS_H_
