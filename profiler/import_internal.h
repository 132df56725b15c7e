// What the profiler's importers share between the line format (sample_line.cc), the log formats
// (log_formats.cc), the checkpoint import (checkpoint_import.cc), the folder rules
// (import_folders.cc) and file access (importers.cc). Internal to the profiler's samples library.
#ifndef SPOTDNN_PROFILER_IMPORT_INTERNAL_H_
#define SPOTDNN_PROFILER_IMPORT_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "profiler/importers.h"
#include "profiler/sample.h"

namespace spotdnn::profiler::import_internal {

// ---- The line format (sample_line.cc) ----

// `text` as a number; INVALID_ARGUMENT naming `field` and the text otherwise.
absl::StatusOr<double> ParseDouble(absl::string_view field, absl::string_view text);

// `text` as a 64-bit integer; INVALID_ARGUMENT naming `field` and the text otherwise.
absl::StatusOr<std::int64_t> ParseInteger(absl::string_view field, absl::string_view text);

// `text` as an int; INVALID_ARGUMENT naming `field` and the text otherwise (or when out of range).
absl::StatusOr<int> ParseSmallInteger(absl::string_view field, absl::string_view text);

// Sets the Sample field `key` (a Sample field name or an accepted alias) from `text`.
// NOT_FOUND for an unknown key.
absl::Status SetField(absl::string_view key, absl::string_view text, Sample& s);

// ---- CSV headers and the checkpoint import (checkpoint_import.cc) ----

// Counts one skipped line of an import and keeps its message (the first kMaxImportErrors).
void AddError(ImportResult& result, std::string message);

// The trimmed, lower-cased columns of a CSV header line.
std::vector<std::string> HeaderColumns(absl::string_view header);

// The index of column `name` in `columns`, or -1.
int ColumnIndex(const std::vector<std::string>& columns, absl::string_view name);

// A TensorBoard-style export without a speed column: one row per checkpoint.
bool IsCheckpointHeader(absl::string_view header);

// What a side file of a checkpoint export holds, or "" when the header is not one.
std::string SideFileKind(absl::string_view header);

// Fills what a sample does not say from the options; a given value the sample says otherwise is
// an error naming both.
absl::Status FillFromOptions(const ImportOptions& o, Sample& s);

// The checkpoint export "Wall Time,Step,SCALAR[,Zone][,Run]" (see LogFormat::kTensorBoardCsv):
// the rows after `header_line` of `lines` into `result`.
absl::Status ImportCheckpoints(const std::vector<absl::string_view>& lines, size_t header_line,
                               absl::string_view source, const ImportOptions& options,
                               ImportResult& result);

// ---- Synchronous throughput files (throughput_import.cc) ----

// True when `header` is a Pollux / Sia throughput file's: placement,local_bsz,step_time,sync_time
// or num_nodes,num_replicas,local_bsz,step_time,sync_time, in any column order.
bool IsThroughputHeader(absl::string_view header);

// The rows after `header_line` of a throughput file into `result`: one synchronous sample per row
// (options.gpu_type required). A bad row is "source:line: field = value: reason", skipped or, with
// stop_on_error, returned.
absl::Status ImportThroughput(const std::vector<absl::string_view>& lines, size_t header_line,
                              absl::string_view source, const ImportOptions& options,
                              ImportResult& result);

// True when `header` is a Pollux validation curve's: progress,iteration,metric (any order, other
// columns beside).
bool IsValidationCurveHeader(absl::string_view header);

// The rows after `header_line` of a validation curve validation-<B>.csv: one training run at
// global batch B (from the file's name, or options.batch_size), job
// "<options.job_id>/validation-<B>"
// ("validation-<B>" without a job), one sample per row with step = iteration and the metric
// kValidationMetric. A bad row is "source:line: field = value: reason", skipped or, with
// stop_on_error, returned; a file whose batch is not known is INVALID_ARGUMENT.
absl::Status ImportValidationCurve(const std::vector<absl::string_view>& lines, size_t header_line,
                                   absl::string_view source, const ImportOptions& options,
                                   ImportResult& result);

// ---- Folder rules (import_folders.cc) ----

// Values the folder's name gives, unless the options give them; the options saying otherwise is
// an error naming both.
absl::Status ApplyFolderContext(const std::string& folder, ImportOptions& o);

}  // namespace spotdnn::profiler::import_internal

#endif  // SPOTDNN_PROFILER_IMPORT_INTERNAL_H_
