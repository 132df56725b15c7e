// The folder rules of an import: run folders "<series>worker<N>", the context a folder's name
// gives (zone, GPU, cluster), and the runs a vm_data.csv says lost a VM.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "profiler/import_internal.h"
#include "profiler/importers.h"

namespace spotdnn::profiler {

using import_internal::ColumnIndex;
using import_internal::HeaderColumns;

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

bool ParseFolderContext(absl::string_view name, FolderContext* context) {
  std::string series;
  int workers = 0;
  if (ParseRunFolderName(name, &series, &workers)) {
    *context = FolderContext{.workers = workers};
    return true;
  }
  // "<P>ps<N><g>": P parameter servers, N workers of GPU g (k, p, v).
  const size_t ps = name.find("ps");
  if (ps == absl::string_view::npos || ps == 0 || name.size() < ps + 4) return false;
  const absl::string_view p = name.substr(0, ps);
  const absl::string_view n = name.substr(ps + 2, name.size() - ps - 3);
  const char g = name.back();
  int servers = 0;
  if (!std::all_of(p.begin(), p.end(), ::isdigit) || !std::all_of(n.begin(), n.end(), ::isdigit) ||
      !absl::SimpleAtoi(p, &servers) || !absl::SimpleAtoi(n, &workers) || servers < 1 ||
      workers < 1) {
    return false;
  }
  const char* gpu = g == 'k' ? "K80" : g == 'p' ? "P100" : g == 'v' ? "V100" : nullptr;
  if (gpu == nullptr) return false;
  *context = FolderContext{.workers = workers, .parameter_servers = servers, .gpu_type = gpu};
  return true;
}

std::vector<RunToLeaveOut> RunsWithRevokedVms(absl::string_view content, absl::string_view source) {
  std::vector<RunToLeaveOut> out;
  std::vector<absl::string_view> lines = absl::StrSplit(content, '\n');
  if (lines.empty()) return out;
  const std::vector<std::string> columns = HeaderColumns(absl::StripSuffix(lines[0], "\r"));
  const int name_col = ColumnIndex(columns, "vm_name");
  const int status_col = ColumnIndex(columns, "revoked");
  if (name_col < 0 || status_col < 0) return out;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<absl::string_view> f = absl::StrSplit(absl::StripSuffix(lines[i], "\r"), ',');
    if (f.size() <= static_cast<size_t>(std::max(name_col, status_col))) continue;
    // "Revoked": this VM was lost while the run went on ("Manually stopped due to revoked
    // master" stops the whole run at once, which leaves its speed until then intact).
    if (absl::AsciiStrToLower(absl::StripAsciiWhitespace(f[status_col])) != "revoked") continue;
    const std::string vm(absl::StripAsciiWhitespace(f[name_col]));
    // "<prefix>-run<N>-<role>" or "run<N>-<role>".
    size_t at = vm.find("-run");
    size_t digits = at == std::string::npos ? std::string::npos : at + 4;
    if (at == std::string::npos && absl::StartsWith(vm, "run")) {
      at = 0;
      digits = 3;
    }
    if (digits == std::string::npos) continue;
    size_t end = digits;
    while (end < vm.size() && std::isdigit(static_cast<unsigned char>(vm[end]))) ++end;
    if (end == digits) continue;
    RunToLeaveOut r;
    r.run = vm.substr(digits, end - digits);
    r.vm_prefix = vm.substr(0, at);
    r.reason = absl::StrCat(source, ":", i + 1, " says ", vm,
                            " was revoked mid-run, so the cluster shrank and the run's speed is "
                            "not that of its cluster");
    out.push_back(std::move(r));
  }
  return out;
}

namespace import_internal {

// Values the folder's name gives, unless the options give them; the options saying otherwise is
// an error naming both.
absl::Status ApplyFolderContext(const std::string& folder, ImportOptions& o) {
  FolderContext context;
  if (!ParseFolderContext(folder, &context)) return absl::OkStatus();
  auto apply = [&](absl::string_view field, auto& value, const auto& said, const auto& unset,
                   absl::string_view what) -> absl::Status {
    if (said == unset) return absl::OkStatus();
    if (value == unset) {
      value = said;
      return absl::OkStatus();
    }
    if (value != said) {
      return absl::InvalidArgumentError(absl::StrCat("given ", field, " = ", value,
                                                     " contradicts the run folder \"", folder,
                                                     "\" (", said, " ", what, ")"));
    }
    return absl::OkStatus();
  };
  if (!o.cluster.empty()) return absl::OkStatus();  // a composition speaks for itself
  if (auto s = apply("cluster_workers", o.cluster_workers, context.workers, 0, "workers");
      !s.ok()) {
    return s;
  }
  if (auto s = apply("parameter_servers", o.parameter_servers, context.parameter_servers, 0,
                     "parameter servers");
      !s.ok()) {
    return s;
  }
  return apply("gpu_type", o.gpu_type, context.gpu_type, std::string(), "GPUs");
}

}  // namespace import_internal
}  // namespace spotdnn::profiler
