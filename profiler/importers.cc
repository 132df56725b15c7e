// File access of an import (ImportPath): opening files as FileAccess allows, within the byte
// budget, walking folders and applying their rules (import_folders.cc).
#include "profiler/importers.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "profiler/import_internal.h"

namespace spotdnn::profiler {
namespace {

namespace fs = std::filesystem;

using import_internal::ApplyFolderContext;

// Opens `path` for reading; without symlinks, no component of it may be one (openat2's
// RESOLVE_NO_SYMLINKS where the kernel has it, else O_NOFOLLOW on the last component) and a FIFO
// does not block the open.
int OpenForImport(const fs::path& path, bool follow_symlinks) {
  if (follow_symlinks) return open(path.c_str(), O_RDONLY | O_CLOEXEC);
  open_how how{};
  how.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const long fd = syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof(how));
  if (fd >= 0 || errno != ENOSYS) return static_cast<int>(fd);
  return open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
}

// The file's content, at most `*budget` bytes (which it uses up), as `access` allows.
absl::StatusOr<std::string> ReadWholeFile(const fs::path& path, const FileAccess& access,
                                          std::uint64_t* budget) {
  const int fd = OpenForImport(path, access.follow_symlinks);
  if (fd < 0) {
    if (errno == ELOOP) {
      return absl::PermissionDeniedError(
          absl::StrCat(path.string(), ": a symbolic link is in the path; not followed"));
    }
    return absl::NotFoundError(
        absl::StrCat(path.string(), ": cannot be read: ", std::strerror(errno)));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path.string(), ": cannot be read"));
  }
  if (!access.follow_symlinks && !S_ISREG(st.st_mode)) {
    return absl::PermissionDeniedError(
        absl::StrCat(path.string(), ": not a regular file (a device, FIFO or socket)"));
  }
  auto too_big = [&](std::uint64_t size) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", size,
                                                   " bytes or more, above what is left of the "
                                                   "import limit (",
                                                   *budget, " bytes)"));
  };
  if (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) > *budget) {
    return too_big(st.st_size);
  }
  std::string content;
  if (S_ISREG(st.st_mode)) content.reserve(st.st_size);
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::NotFoundError(
          absl::StrCat(path.string(), ": cannot be read: ", std::strerror(errno)));
    }
    if (n == 0) break;
    if (content.size() + n > *budget) return too_big(content.size() + n);
    content.append(buffer, n);
  }
  *budget -= content.size();
  return content;
}

bool IsLogFile(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".csv" || ext == ".log" || ext == ".txt" || ext == ".tsv";
}

void Merge(ImportResult& into, ImportResult&& from) {
  into.files += from.files;
  into.skipped += from.skipped;
  into.notes.insert(into.notes.end(), from.notes.begin(), from.notes.end());
  for (std::string& e : from.errors) {
    if (static_cast<int>(into.errors.size()) < kMaxImportErrors)
      into.errors.push_back(std::move(e));
  }
  into.samples.insert(into.samples.end(), std::make_move_iterator(from.samples.begin()),
                      std::make_move_iterator(from.samples.end()));
}

// The runs a vm_data.csv in `dir` says lost a VM mid-run (none when there is no such file, or
// `access` does not let it be read: a symbolic link, say). Read once per folder (`cache`), from
// the import's byte budget; going past that budget is the one error.
absl::StatusOr<std::vector<RunToLeaveOut>> LeaveOutFrom(
    const fs::path& dir, const FileAccess& access, std::uint64_t* budget,
    std::map<fs::path, std::vector<RunToLeaveOut>>& cache) {
  if (auto it = cache.find(dir); it != cache.end()) return it->second;
  std::vector<RunToLeaveOut>& out = cache[dir];
  const fs::path vm_data = dir / "vm_data.csv";
  std::error_code ec;
  const fs::file_status status =
      access.follow_symlinks ? fs::status(vm_data, ec) : fs::symlink_status(vm_data, ec);
  if (!fs::is_regular_file(status)) return out;
  auto content = ReadWholeFile(vm_data, access, budget);
  if (absl::IsInvalidArgument(content.status())) return content.status();
  if (!content.ok()) return out;
  out = RunsWithRevokedVms(*content, vm_data.string());
  return out;
}

}  // namespace

absl::StatusOr<ImportResult> ImportPath(const std::string& path, const ImportOptions& options,
                                        const FileAccess& access) {
  std::uint64_t budget = access.max_bytes;
  std::map<fs::path, std::vector<RunToLeaveOut>> leave_out;  // by folder
  std::error_code ec;
  const fs::path root(path);
  if (!fs::exists(root, ec)) {
    return absl::NotFoundError(absl::StrCat("path = \"", path, "\": no such file or folder"));
  }
  if (!fs::is_directory(root, ec)) {
    ImportOptions o = options;
    std::string series;
    int workers = 0;
    const std::string parent = root.parent_path().filename().string();
    if (auto s = ApplyFolderContext(parent, o); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
    }
    if (ParseRunFolderName(parent, &series, &workers) && o.job_id.empty()) o.job_id = parent;
    if (o.leave_out.empty()) {
      auto leave = LeaveOutFrom(root.parent_path(), access, &budget, leave_out);
      if (!leave.ok()) return leave.status();
      o.leave_out = *std::move(leave);
    }
    auto content = ReadWholeFile(root, access, &budget);
    if (!content.ok()) return content.status();
    return ImportText(*content, path, o);
  }
  std::vector<fs::path> files;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    // Without symlinks, a link is not followed even to a regular file.
    const bool regular = access.follow_symlinks ? it->is_regular_file(ec)
                                                : fs::is_regular_file(it->symlink_status(ec));
    if (regular && IsLogFile(it->path())) files.push_back(it->path());
    if (static_cast<std::uint64_t>(files.size()) > static_cast<std::uint64_t>(access.max_files)) {
      return absl::InvalidArgumentError(absl::StrCat("path = \"", path, "\": more than ",
                                                     access.max_files, " log files; import fewer"));
    }
  }
  if (ec) return absl::NotFoundError(absl::StrCat(path, ": ", ec.message()));
  std::sort(files.begin(), files.end());
  ImportResult result;
  for (const fs::path& file : files) {
    ImportOptions o = options;
    const fs::path relative = file.parent_path().lexically_relative(root);
    if (!relative.empty() && relative != ".") {
      o.job_id = options.job_id.empty()
                     ? relative.generic_string()
                     : absl::StrCat(options.job_id, "/", relative.generic_string());
      // The nearest enclosing run folder says how many workers trained together.
      for (fs::path p = relative; !p.empty() && p != "."; p = p.parent_path()) {
        FolderContext context;
        if (ParseFolderContext(p.filename().string(), &context)) {
          if (auto s = ApplyFolderContext(p.filename().string(), o); !s.ok()) {
            return absl::InvalidArgumentError(absl::StrCat(file.string(), ": ", s.message()));
          }
          break;
        }
        if (p.parent_path() == p) break;
      }
    } else if (auto s = ApplyFolderContext(root.lexically_normal().filename().string(), o);
               !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(file.string(), ": ", s.message()));
    }
    if (access.stop) {
      if (auto s = access.stop(); !s.ok()) return s;
    }
    if (o.leave_out.empty()) {
      auto leave = LeaveOutFrom(file.parent_path(), access, &budget, leave_out);
      if (!leave.ok()) return leave.status();
      o.leave_out = *std::move(leave);
    }
    auto content = ReadWholeFile(file, access, &budget);
    if (!content.ok()) return content.status();
    auto one = ImportText(*content, file.string(), o);
    if (!one.ok()) return one.status();
    Merge(result, *std::move(one));
  }
  return result;
}

}  // namespace spotdnn::profiler
