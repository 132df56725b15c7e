// Reading training logs into Samples: TensorBoard scalar exports, the spotDNN prototype's worker
// logs, CSV files with a header, and spotdnn sample lines that a training script prints.
//
// The sample line format (documented for training scripts, any language, no dependency):
//   SPOTDNN_SAMPLE key=value key=value ...
// anywhere in a line (a logger's prefix before it is fine); keys are the Sample field names
// (job_id, worker_id, instance_type, gpu_type, gpus, batch_size, step, wall_time_s,
// iteration_time_s, loss, bytes_sent, bytes_received, gpu_memory_gib, cluster_workers,
// communication_time_s, cluster_steps_per_s); a synchronous run's rank adds placement (or
// instances and gpus_per_instance), local_batch, ranks and sync_time. Lines without the marker
// are ignored.
//
// Implemented by seam: sample_line.cc (the line format), log_formats.cc (the log formats and
// ImportText), checkpoint_import.cc (the checkpoint export), import_folders.cc (the folder rules),
// importers.cc (file access and ImportPath).
#ifndef SPOTDNN_PROFILER_IMPORTERS_H_
#define SPOTDNN_PROFILER_IMPORTERS_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "profiler/sample.h"

namespace spotdnn::profiler {

// The log formats the importer reads.
enum class LogFormat {
  kAuto,  // decided from the file's first line
  // "Wall time,Step,Value[,Step Time]" (Value = global steps/s), or a checkpoint export
  // "Wall Time,Step,SCALAR[,Zone][,Run]": one row per checkpoint, SCALAR (Accuracy, Loss) kept
  // as a sample field, the speed from the steps and wall times, one job per Run ("JOB/run-3",
  // "JOB/ZONE/run-3" with a Zone column).
  kTensorBoardCsv,
  kSpotdnnWorker,  // tab separated: datetime, global step, images, loss, examples/s, s/batch
  kCsv,            // a header line naming Sample fields, then one sample per line
  kSampleLines,    // "SPOTDNN_SAMPLE key=value ..." lines inside any log
};

// Parses "auto", "tensorboard", "spotdnn-worker", "csv", "samples"; INVALID_ARGUMENT otherwise.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);
// The name ParseLogFormat reads.
absl::string_view LogFormatName(LogFormat format);

// A run of a checkpoint export to leave out, and why (a worker revoked mid-run: the cluster
// shrank, so the run's speed is not that of its cluster).
struct RunToLeaveOut {
  std::string run{};        // the Run column's value
  std::string vm_prefix{};  // what precedes "-run<N>-" in the VM's name; holds the zone, if any
  std::string reason{};
};

// How to import, and the context that a log itself lacks. A value given here that the file (or
// its run folder's name) says otherwise is an error naming both.
struct ImportOptions {
  LogFormat format = LogFormat::kAuto;
  std::string job_id{};         // job of every sample (folder import: a prefix for the runs)
  bool stop_on_error = false;   // fail at the first bad line instead of skipping it
  std::string instance_type{};  // copied into samples that do not say
  std::string gpu_type{};
  int gpus = 0;
  int batch_size = 0;
  int cluster_workers = 0;  // |N| of the run, when the log does not say
  int parameter_servers = 0;
  std::string cluster{};  // "TYPE=N,..." for a run on several types (instead of instance_type)
  // Runs of a checkpoint export to leave out; ImportPath fills it from a vm_data.csv beside the
  // file (VM_name,Uptime,Revoked: a VM whose status is "Revoked" was lost mid-run).
  std::vector<RunToLeaveOut> leave_out{};
};

// What an import produced.
struct ImportResult {
  std::vector<Sample> samples{};
  std::uint64_t skipped = 0;          // lines that were malformed or rejected
  std::vector<std::string> errors{};  // "file:line: reason", the first kMaxImportErrors of them
  int files = 0;                      // files read
  // Side files read rather than imported (per-run durations, costs, VM uptimes) and runs left
  // out, with why.
  std::vector<std::string> notes{};
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
// directly in the folder use options.job_id. A folder named "<P>ps<N><g>" (the ICAC 2019 layout:
// P parameter servers, N workers, g = k, p or v for K80, P100, V100) gives those. Side files of
// checkpoint exports (per-run Duration, Cost, VM uptimes) are not samples: they are noted, and a
// vm_data.csv beside a file says which runs lost a worker mid-run (left out; read as `access`
// allows, from its byte budget). NOT_FOUND names a missing path; INVALID_ARGUMENT a value in
// `options` that the folder's name contradicts; `access` bounds what is read.
absl::StatusOr<ImportResult> ImportPath(const std::string& path, const ImportOptions& options,
                                        const FileAccess& access = {});

// The metric name of a Pollux validation curve's values (validation-<B>.csv, column metric).
inline constexpr absl::string_view kValidationMetric = "validation";

// The marker that starts a sample line's fields.
inline constexpr absl::string_view kSampleLineMarker = "SPOTDNN_SAMPLE";

// Parses one line of the sample line format (the one parser every reader of these lines uses):
// nullopt when the line has no SPOTDNN_SAMPLE marker; otherwise the Sample its key=value fields
// give (not yet validated: see ValidateSample), or INVALID_ARGUMENT naming the bad token or field.
absl::StatusOr<std::optional<Sample>> ParseSampleLine(absl::string_view line);

// Splits a run folder name "<series>worker<N>" into series and N; false when it is not one.
bool ParseRunFolderName(absl::string_view name, std::string* series, int* workers);

// What a run folder's name says about its runs (the CM-DARE and ICAC 2019 layouts); 0 or empty
// when it does not say.
struct FolderContext {
  int workers = 0;
  int parameter_servers = 0;
  std::string gpu_type{};
};
// FolderContext of a folder named "<series>worker<N>" or "<P>ps<N><g>"; false for other names.
bool ParseFolderContext(absl::string_view name, FolderContext* context);

// The runs to leave out per a vm_data.csv's content (VM_name,Uptime,Revoked): every run with a VM
// whose status is "Revoked". `source` names the file in the reasons.
std::vector<RunToLeaveOut> RunsWithRevokedVms(absl::string_view content, absl::string_view source);

}  // namespace spotdnn::profiler

#endif  // SPOTDNN_PROFILER_IMPORTERS_H_
