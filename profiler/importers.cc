#include "profiler/importers.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

namespace spotdnn::profiler {
namespace {

namespace fs = std::filesystem;

constexpr absl::string_view kSampleMarker = "SPOTDNN_SAMPLE";

absl::StatusOr<double> ParseDouble(absl::string_view field, absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  double value = 0;
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is empty"));
  if (!absl::SimpleAtod(text, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " = \"", text, "\": not a number"));
  }
  return value;
}

absl::StatusOr<std::int64_t> ParseInteger(absl::string_view field, absl::string_view text) {
  auto value = ParseDouble(field, text);
  if (!value.ok()) return value.status();
  if (!std::isfinite(*value) || *value != std::floor(*value) || std::fabs(*value) > 9e15) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = \"", absl::StripAsciiWhitespace(text), "\": not a whole number"));
  }
  return static_cast<std::int64_t>(*value);
}

absl::StatusOr<int> ParseSmallInteger(absl::string_view field, absl::string_view text) {
  auto value = ParseInteger(field, text);
  if (!value.ok()) return value.status();
  if (*value > 1'000'000'000 || *value < -1'000'000'000) {
    return absl::InvalidArgumentError(absl::StrCat(field, " = ", *value, ": out of range"));
  }
  return static_cast<int>(*value);
}

// Sets the Sample field `key` (a Sample field name or an accepted alias) from `text`.
// NOT_FOUND for an unknown key.
absl::Status SetField(absl::string_view key, absl::string_view text, Sample& s) {
  const std::string k = absl::AsciiStrToLower(absl::StripAsciiWhitespace(key));
  auto set_double = [&](double& out) -> absl::Status {
    auto v = ParseDouble(k, text);
    if (!v.ok()) return v.status();
    out = *v;
    return absl::OkStatus();
  };
  auto set_int = [&](int& out) -> absl::Status {
    auto v = ParseSmallInteger(k, text);
    if (!v.ok()) return v.status();
    out = *v;
    return absl::OkStatus();
  };
  auto set_int64 = [&](std::int64_t& out) -> absl::Status {
    auto v = ParseInteger(k, text);
    if (!v.ok()) return v.status();
    out = *v;
    return absl::OkStatus();
  };
  const std::string value(absl::StripAsciiWhitespace(text));
  if (k == "job_id" || k == "job") return (s.job_id = value, absl::OkStatus());
  if (k == "worker_id" || k == "worker") return (s.worker_id = value, absl::OkStatus());
  if (k == "instance_type") return (s.instance_type = value, absl::OkStatus());
  if (k == "gpu_type" || k == "gpu") return (s.gpu_type = value, absl::OkStatus());
  if (k == "gpus") return set_int(s.gpus);
  if (k == "batch_size" || k == "batch") return set_int(s.batch_size);
  if (k == "step" || k == "global_step") return set_int64(s.step);
  if (k == "wall_time_s" || k == "wall_time" || k == "wall time") return set_double(s.wall_time_s);
  if (k == "iteration_time_s" || k == "step_time" || k == "step time" || k == "s_per_batch") {
    return set_double(s.iteration_time_s);
  }
  if (k == "loss") return set_double(s.loss);
  if (k == "bytes_sent") return set_int64(s.bytes_sent);
  if (k == "bytes_received") return set_int64(s.bytes_received);
  if (k == "gpu_memory_gib") return set_double(s.gpu_memory_gib);
  if (k == "cluster_workers" || k == "workers") return set_int(s.cluster_workers);
  if (k == "communication_time_s") return set_double(s.communication_time_s);
  if (k == "cluster_steps_per_s" || k == "steps_per_s" || k == "value") {
    return set_double(s.cluster_steps_per_s);
  }
  return absl::NotFoundError(absl::StrCat("unknown field \"", key, "\""));
}

// A line parser: fills `sample` from one line, or returns false in `*use` for lines that carry
// no sample (blank, comment, header).
using LineParser = std::function<absl::Status(absl::string_view line, Sample& sample, bool* use)>;

absl::StatusOr<absl::Time> ParseDateTime(absl::string_view text) {
  const std::string t(absl::StripAsciiWhitespace(text));
  absl::Time time;
  std::string err;
  for (const char* format : {"%Y-%m-%d %H:%M:%E*S", "%Y-%m-%dT%H:%M:%E*S", "%Y-%m-%d %H:%M:%E*S%Ez",
                             "%Y-%m-%dT%H:%M:%E*S%Ez", "%Y-%m-%dT%H:%M:%E*SZ"}) {
    if (absl::ParseTime(format, t, absl::UTCTimeZone(), &time, &err)) return time;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("datetime = \"", t, "\": expected YYYY-MM-DD HH:MM:SS[.fff]"));
}

// TensorBoard's scalar export: the header names the columns.
absl::StatusOr<LineParser> TensorBoardParser(absl::string_view header) {
  std::vector<std::string> columns;
  for (absl::string_view c : absl::StrSplit(header, ',')) {
    columns.push_back(absl::AsciiStrToLower(absl::StripAsciiWhitespace(c)));
  }
  int wall = -1, step = -1, value = -1, step_time = -1;
  for (int i = 0; i < static_cast<int>(columns.size()); ++i) {
    if (columns[i] == "wall time") wall = i;
    if (columns[i] == "step") step = i;
    if (columns[i] == "value") value = i;
    if (columns[i] == "step time") step_time = i;
  }
  if (wall < 0 || step < 0 || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header \"", header, "\": a TensorBoard export has the columns Wall time,Step,Value"));
  }
  const size_t n = columns.size();
  return LineParser([=](absl::string_view line, Sample& s, bool* use) -> absl::Status {
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    if (f.size() != n) {
      return absl::InvalidArgumentError(
          absl::StrFormat("expected %d comma-separated fields, got %d", n, f.size()));
    }
    auto w = ParseDouble("Wall time", f[wall]);
    if (!w.ok()) return w.status();
    auto st = ParseInteger("Step", f[step]);
    if (!st.ok()) return st.status();
    auto v = ParseDouble("Value", f[value]);
    if (!v.ok()) return v.status();
    s.wall_time_s = *w;
    s.step = *st;
    s.cluster_steps_per_s = *v;
    if (step_time >= 0 && !absl::StripAsciiWhitespace(f[step_time]).empty()) {
      auto t = ParseDouble("Step Time", f[step_time]);
      if (!t.ok()) return t.status();
      s.iteration_time_s = *t;
    }
    *use = true;
    return absl::OkStatus();
  });
}

// The spotDNN prototype's worker log: datetime, global step, images (the batch), loss,
// examples/s, s/batch; tab separated. A header line starting with a non-date is skipped.
LineParser SpotdnnWorkerParser() {
  return [](absl::string_view line, Sample& s, bool* use) -> absl::Status {
    std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
    while (!f.empty() && absl::StripAsciiWhitespace(f.back()).empty()) f.pop_back();
    if (f.size() != 6) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "expected 6 tab-separated fields (datetime, global step, images, loss, examples/s, "
          "s/batch), got %d",
          f.size()));
    }
    auto time = ParseDateTime(f[0]);
    if (!time.ok()) return time.status();
    auto step = ParseInteger("global step", f[1]);
    if (!step.ok()) return step.status();
    auto images = ParseSmallInteger("images", f[2]);
    if (!images.ok()) return images.status();
    auto loss = ParseDouble("loss", f[3]);
    if (!loss.ok()) return loss.status();
    auto examples = ParseDouble("examples/s", f[4]);
    if (!examples.ok()) return examples.status();
    auto seconds = ParseDouble("s/batch", f[5]);
    if (!seconds.ok()) return seconds.status();
    s.wall_time_s = absl::ToDoubleSeconds(*time - absl::UnixEpoch());
    s.step = *step;
    s.batch_size = *images;
    s.loss = *loss;
    s.iteration_time_s = *seconds;
    if (!std::isfinite(*examples) || *examples < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("examples/s = %g: must be finite and not negative", *examples));
    }
    *use = true;
    return absl::OkStatus();
  };
}

absl::StatusOr<LineParser> CsvParser(absl::string_view header) {
  std::vector<std::string> columns;
  for (absl::string_view c : absl::StrSplit(header, ',')) columns.emplace_back(c);
  int known = 0;
  std::vector<bool> use_column;
  for (const std::string& c : columns) {
    Sample probe;
    const absl::Status s = SetField(c, "0", probe);
    use_column.push_back(!absl::IsNotFound(s));
    known += use_column.back() ? 1 : 0;
  }
  if (known == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("header \"", header,
                     "\": names no sample field (e.g. step, wall_time_s, iteration_time_s, loss)"));
  }
  return LineParser([=](absl::string_view line, Sample& s, bool* use) -> absl::Status {
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    if (f.size() != columns.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "expected %d comma-separated fields as in the header, got %d", columns.size(), f.size()));
    }
    for (size_t i = 0; i < f.size(); ++i) {
      if (!use_column[i] || absl::StripAsciiWhitespace(f[i]).empty()) continue;
      if (auto status = SetField(columns[i], f[i], s); !status.ok()) return status;
    }
    *use = true;
    return absl::OkStatus();
  });
}

LineParser SampleLineParser() {
  return [](absl::string_view line, Sample& s, bool* use) -> absl::Status {
    const size_t at = line.find(kSampleMarker);
    if (at == absl::string_view::npos) return absl::OkStatus();  // other log output
    absl::string_view rest = line.substr(at + kSampleMarker.size());
    for (absl::string_view token :
         absl::StrSplit(rest, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      const size_t eq = token.find('=');
      if (eq == absl::string_view::npos || eq == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", token, "\": expected key=value after ", kSampleMarker));
      }
      if (auto status = SetField(token.substr(0, eq), token.substr(eq + 1), s); !status.ok()) {
        return status;
      }
    }
    *use = true;
    return absl::OkStatus();
  };
}

LogFormat DetectFormat(absl::string_view first_line, absl::string_view content) {
  if (absl::StrContains(content, kSampleMarker)) return LogFormat::kSampleLines;
  const std::string lower = absl::AsciiStrToLower(first_line);
  if (absl::StartsWith(lower, "wall time,")) return LogFormat::kTensorBoardCsv;
  if (absl::StrContains(first_line, '\t')) return LogFormat::kSpotdnnWorker;
  return LogFormat::kCsv;
}

void AddError(ImportResult& result, std::string message) {
  ++result.skipped;
  if (static_cast<int>(result.errors.size()) < kMaxImportErrors) {
    result.errors.push_back(std::move(message));
  }
}

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  for (LogFormat f : {LogFormat::kAuto, LogFormat::kTensorBoardCsv, LogFormat::kSpotdnnWorker,
                      LogFormat::kCsv, LogFormat::kSampleLines}) {
    if (name == LogFormatName(f)) return f;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "format = \"", name, "\": expected auto, tensorboard, spotdnn-worker, csv or samples"));
}

absl::string_view LogFormatName(LogFormat format) {
  switch (format) {
    case LogFormat::kAuto:
      return "auto";
    case LogFormat::kTensorBoardCsv:
      return "tensorboard";
    case LogFormat::kSpotdnnWorker:
      return "spotdnn-worker";
    case LogFormat::kCsv:
      return "csv";
    case LogFormat::kSampleLines:
      return "samples";
  }
  return "auto";
}

bool ParseRunFolderName(absl::string_view name, std::string* series, int* workers) {
  const size_t at = name.rfind("worker");
  if (at == absl::string_view::npos || at == 0) return false;
  absl::string_view digits = name.substr(at + 6);
  int n = 0;
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit) ||
      !absl::SimpleAtoi(digits, &n) || n <= 0) {
    return false;
  }
  *series = std::string(name.substr(0, at));
  *workers = n;
  return true;
}

absl::StatusOr<ImportResult> ImportText(absl::string_view content, absl::string_view source,
                                        const ImportOptions& options) {
  ImportResult result;
  result.files = 1;
  std::vector<absl::string_view> lines = absl::StrSplit(content, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  // The first line that is not blank.
  size_t first = 0;
  while (first < lines.size() && absl::StripAsciiWhitespace(lines[first]).empty()) ++first;
  if (first == lines.size()) return result;  // an empty file holds no samples
  auto strip_cr = [](absl::string_view l) { return absl::StripSuffix(l, "\r"); };
  const absl::string_view first_line = strip_cr(lines[first]);

  LogFormat format = options.format;
  if (format == LogFormat::kAuto) format = DetectFormat(first_line, content);
  LineParser parser;
  size_t body = first;  // first line that holds data
  switch (format) {
    case LogFormat::kTensorBoardCsv:
    case LogFormat::kCsv: {
      auto p = format == LogFormat::kCsv ? CsvParser(first_line) : TensorBoardParser(first_line);
      if (!p.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ":", first + 1, ": ", p.status().message()));
      }
      parser = *std::move(p);
      body = first + 1;
      break;
    }
    case LogFormat::kSpotdnnWorker:
      parser = SpotdnnWorkerParser();
      // A header line (its first field is not a date) is skipped.
      if (!ParseDateTime(std::vector<absl::string_view>(absl::StrSplit(first_line, '\t'))[0])
               .ok() &&
          !absl::StrContains(first_line, "SPOTDNN")) {
        std::string lower = absl::AsciiStrToLower(first_line);
        if (absl::StrContains(lower, "step")) body = first + 1;
      }
      break;
    case LogFormat::kSampleLines:
    case LogFormat::kAuto:
      parser = SampleLineParser();
      break;
  }

  StepOrderChecker order;
  for (size_t i = body; i < lines.size(); ++i) {
    const absl::string_view line = strip_cr(lines[i]);
    const absl::string_view trimmed = absl::StripAsciiWhitespace(line);
    if (trimmed.empty() || (format != LogFormat::kSampleLines && trimmed[0] == '#')) continue;
    Sample s;
    s.job_id = options.job_id;
    bool use = false;
    absl::Status status = parser(line, s, &use);
    if (status.ok() && !use) continue;
    if (status.ok()) {
      if (s.instance_type.empty()) s.instance_type = options.instance_type;
      if (s.gpu_type.empty()) s.gpu_type = options.gpu_type;
      if (s.gpus == 0) s.gpus = options.gpus;
      if (s.batch_size == 0) s.batch_size = options.batch_size;
      if (s.cluster_workers == 0) s.cluster_workers = options.cluster_workers;
      status = ValidateSample(s);
    }
    if (status.ok()) status = order.Check(s);
    if (!status.ok()) {
      std::string message = absl::StrCat(source, ":", i + 1, ": ", status.message());
      if (options.stop_on_error) return absl::InvalidArgumentError(message);
      AddError(result, std::move(message));
      continue;
    }
    result.samples.push_back(std::move(s));
  }
  return result;
}

namespace {

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
  for (std::string& e : from.errors) {
    if (static_cast<int>(into.errors.size()) < kMaxImportErrors)
      into.errors.push_back(std::move(e));
  }
  into.samples.insert(into.samples.end(), std::make_move_iterator(from.samples.begin()),
                      std::make_move_iterator(from.samples.end()));
}

}  // namespace

absl::StatusOr<ImportResult> ImportPath(const std::string& path, const ImportOptions& options,
                                        const FileAccess& access) {
  std::uint64_t budget = access.max_bytes;
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
    if (ParseRunFolderName(parent, &series, &workers)) {
      if (o.cluster_workers == 0) o.cluster_workers = workers;
      if (o.job_id.empty()) o.job_id = parent;
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
        std::string series;
        int workers = 0;
        if (ParseRunFolderName(p.filename().string(), &series, &workers)) {
          if (options.cluster_workers == 0) o.cluster_workers = workers;
          break;
        }
        if (p.parent_path() == p) break;
      }
    }
    if (access.stop) {
      if (auto s = access.stop(); !s.ok()) return s;
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
