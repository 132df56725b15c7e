// Reading training logs into Samples: TensorBoard scalar exports, the spotDNN prototype's worker
// logs, CSV files with a header, and spotdnn sample lines that a training script prints.
//
// The sample line format (documented for training scripts, any language, no dependency):
//   SPOTDNN_SAMPLE key=value key=value ...
// anywhere in a line (a logger's prefix before it is fine); keys are the Sample field names
// (job_id, worker_id, instance_type, gpu_type, gpus, batch_size, step, wall_time_s,
// iteration_time_s, loss, bytes_sent, bytes_received, gpu_memory_gib, cluster_workers,
// communication_time_s, cluster_steps_per_s). Lines without the marker are ignored.
#ifndef SPOTDNN_PROFILER_IMPORTERS_H_
#define SPOTDNN_PROFILER_IMPORTERS_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "profiler/sample.h"

namespace spotdnn::profiler {

// The log formats the importer reads.
enum class LogFormat {
  kAuto,            // decided from the file's first line
  kTensorBoardCsv,  // "Wall time,Step,Value[,Step Time]" (Value = global steps/s)
  kSpotdnnWorker,   // tab separated: datetime, global step, images, loss, examples/s, s/batch
  kCsv,             // a header line naming Sample fields, then one sample per line
  kSampleLines,     // "SPOTDNN_SAMPLE key=value ..." lines inside any log
};

// Parses "auto", "tensorboard", "spotdnn-worker", "csv", "samples"; INVALID_ARGUMENT otherwise.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);
// The name ParseLogFormat reads.
absl::string_view LogFormatName(LogFormat format);

// How to import, and the context that a log itself lacks.
struct ImportOptions {
  LogFormat format = LogFormat::kAuto;
  std::string job_id{};         // job of every sample (folder import: a prefix for the runs)
  bool stop_on_error = false;   // fail at the first bad line instead of skipping it
  std::string instance_type{};  // copied into samples that do not say
  std::string gpu_type{};
  int gpus = 0;
  int batch_size = 0;
  int cluster_workers = 0;  // |N| of the run, when the log does not say
};

// What an import produced.
struct ImportResult {
  std::vector<Sample> samples{};
  std::uint64_t skipped = 0;          // lines that were malformed or rejected
  std::vector<std::string> errors{};  // "file:line: reason", the first kMaxImportErrors of them
  int files = 0;                      // files read
};

// Most error lines an ImportResult keeps (the count of skipped lines is always exact).
inline constexpr int kMaxImportErrors = 100;

// Imports one file's `content`; `source` names it in errors. With stop_on_error the first bad
// line is INVALID_ARGUMENT "source:line: reason"; otherwise bad lines are skipped and counted.
absl::StatusOr<ImportResult> ImportText(absl::string_view content, absl::string_view source,
                                        const ImportOptions& options);

// How ImportPath reaches files. The defaults are a user's own import (the CLI's); a server
// importing from its import roots (profiler/import_roots.h) sets every field.
struct FileAccess {
  // false: a file with a symbolic link anywhere in its path is not read (refused, or skipped in a
  // folder), and neither is anything but a regular file (a FIFO, a device such as /dev/zero).
  bool follow_symlinks = true;
  // Most bytes read in all; a file that would go past it is INVALID_ARGUMENT.
  std::uint64_t max_bytes = std::numeric_limits<std::uint64_t>::max();
  // Most files a folder import reads; more is INVALID_ARGUMENT.
  int max_files = std::numeric_limits<int>::max();
  // Polled before each file: a non-OK status ends the import with it (a call's deadline).
  std::function<absl::Status()> stop{};
};

// Imports a file, or every *.csv / *.log / *.txt file under a folder. In a folder, a run folder
// named "<series>worker<N>" (the CM-DARE layout) gives its samples cluster_workers = N and the job
// id "<options.job_id>/<path relative to the folder>" (no prefix when job_id is empty); files
// directly in the folder use options.job_id. NOT_FOUND names a missing path; `access` bounds
// what is read.
absl::StatusOr<ImportResult> ImportPath(const std::string& path, const ImportOptions& options,
                                        const FileAccess& access = {});

// Splits a run folder name "<series>worker<N>" into series and N; false when it is not one.
bool ParseRunFolderName(absl::string_view name, std::string* series, int* workers);

}  // namespace spotdnn::profiler

#endif  // SPOTDNN_PROFILER_IMPORTERS_H_
