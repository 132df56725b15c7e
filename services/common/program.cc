#include "services/common/program.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <utility>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/marshalling.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

#ifndef SPOTDNN_VERSION
#define SPOTDNN_VERSION "unknown"
#endif

namespace spotdnn::services {
namespace {

// Set once, before flags are parsed; read by the usage config's version callback.
std::string& ProgramName() {
  static std::string* name = new std::string("spotdnn");
  return *name;
}

// absl's help and version flags: handled here (absl's --help exits 1).
bool IsHelpFlag(absl::string_view name) {
  return name == "help" || name == "helpshort" || name == "helpfull" || name == "helppackage";
}

// Optimal string alignment distance: insertions, deletions, substitutions and swaps of
// neighbours ("worklaod" is one from "workload").
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The placeholder --help shows for a flag's value, and what a bad value is said not to be.
struct ValueKind {
  const char* placeholder;
  const char* expected;
};

ValueKind KindOf(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<bool>()) return {"", "true or false"};
  if (flag.IsOfType<absl::Duration>()) {
    return {"DURATION", "a duration; give a number with a unit, like 500ms, 2s or 1m"};
  }
  if (flag.IsOfType<int>() || flag.IsOfType<int64_t>()) return {"N", "a whole number"};
  if (flag.IsOfType<uint64_t>() || flag.IsOfType<uint32_t>()) {
    return {"N", "a whole number >= 0"};
  }
  if (flag.IsOfType<double>()) return {"X", "a number"};
  if (flag.IsOfType<std::vector<std::string>>()) return {"A,B,...", "a comma-separated list"};
  return {"VALUE", "a valid value"};
}

template <typename T>
bool Parses(absl::string_view text) {
  T value;
  std::string error;
  return absl::ParseFlag(text, &value, &error);
}

// Whether `value` is one `flag` accepts (without setting the flag).
bool ValueParses(const absl::CommandLineFlag& flag, absl::string_view value) {
  if (flag.IsOfType<bool>()) return Parses<bool>(value);
  if (flag.IsOfType<absl::Duration>()) return Parses<absl::Duration>(value);
  if (flag.IsOfType<int>()) return Parses<int>(value);
  if (flag.IsOfType<int64_t>()) return Parses<int64_t>(value);
  if (flag.IsOfType<uint64_t>()) return Parses<uint64_t>(value);
  if (flag.IsOfType<uint32_t>()) return Parses<uint32_t>(value);
  if (flag.IsOfType<double>()) return Parses<double>(value);
  return true;  // strings and lists: any text
}

// The flags --help lists: the program's own (and, for --helpfull, Abseil's too).
std::vector<absl::CommandLineFlag*> ListedFlags(bool full) {
  std::vector<absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->IsRetired() || IsHelpFlag(name) || name == "version") continue;
    if (full || IsProgramFlagFile(flag->Filename())) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  return flags;
}

void PrintHelp(absl::string_view name, absl::string_view usage, bool full, std::ostream& out) {
  out << name << ": " << usage << "\n\nUsage: " << name << " [FLAGS]\n";
  std::map<std::string, std::vector<absl::CommandLineFlag*>> groups;
  for (absl::CommandLineFlag* flag : ListedFlags(full)) {
    groups[IsProgramFlagFile(flag->Filename()) ? FlagGroup(flag->Name(), flag->Filename())
                                               : "Abseil"]
        .push_back(flag);
  }
  auto print_group = [&](const std::string& group) {
    auto it = groups.find(group);
    if (it == groups.end()) return;
    out << "\n" << group << ":\n";
    for (const absl::CommandLineFlag* flag : it->second) {
      const ValueKind kind = KindOf(*flag);
      out << "  --" << flag->Name();
      if (*kind.placeholder != '\0') out << "=" << kind.placeholder;
      std::string value = flag->DefaultValue();
      if (flag->IsOfType<std::string>()) value = absl::StrCat("\"", value, "\"");
      const std::string help = flag->Help();
      out << "\n      " << absl::StrReplaceAll(help, {{"\n", "\n      "}});
      // A help text that says its own default ("default: $SPOTDNN_PROFILER") gets no second one.
      if (!absl::StrContains(absl::AsciiStrToLower(help), "default:")) {
        out << " (default: " << value << ")";
      }
      out << "\n";
    }
    groups.erase(it);
  };
  for (const char* group : {"Serving", "Store", "Catalogs and workloads", "Imports", "Planning",
                            "Instance", "Detection", "Replicas", "Wrapper", "Samples",
                            "Checkpoints", "Simulation", "Security", "Metrics"}) {
    print_group(group);
  }
  while (!groups.empty()) print_group(groups.begin()->first);
  out << "\nHelp:\n  --help\n      this list (--helpfull adds Abseil's flags)\n  --version\n"
      << "      print \"" << name << " VERSION\"\n";
}

}  // namespace

absl::string_view ProjectVersion() { return SPOTDNN_VERSION; }

bool IsProgramFlagFile(absl::string_view file) {
  // Abseil's own flags (--flagfile, --fromenv, --tryfromenv, --undefok) stay in --helpfull.
  if (absl::StrContains(file, "absl/")) return false;
  for (absl::string_view folder :
       {"services/", "detector/", "profiler/", "provisioner/", "predictor/", "bench/", "tests/"}) {
    if (absl::StrContains(file, folder)) return true;
  }
  return false;
}

std::string NearestName(absl::string_view typed, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& c : candidates) {
    const size_t d = EditDistance(typed, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  // A typo: one or two edits, or a third of the name for a long one.
  const size_t limit = std::max<size_t>(2, typed.size() / 3);
  if (best_distance == 0 || best_distance > limit) return "";
  return best;
}

std::string FlagGroup(absl::string_view name, absl::string_view file) {
  static const auto* groups = new std::map<std::string, std::string, std::less<>>{
      {"listen", "Serving"},
      {"port_file", "Serving"},
      {"host", "Serving"},
      {"port", "Serving"},
      {"threads", "Serving"},
      {"keep_alive", "Serving"},
      {"db", "Store"},
      {"store", "Store"},
      {"event_retention", "Store"},
      {"catalog_dir", "Catalogs and workloads"},
      {"workload_dir", "Catalogs and workloads"},
      {"import_root", "Imports"},
      {"max_import_bytes", "Imports"},
      {"max_solve_time", "Planning"},
      {"detector", "Instance"},
      {"instance_id", "Instance"},
      {"job_id", "Instance"},
      {"instance_type", "Instance"},
      {"workers", "Instance"},
      {"batch_size", "Instance"},
      {"cloud", "Detection"},
      {"metadata_endpoint", "Detection"},
      {"poll_interval", "Detection"},
      {"request_timeout", "Detection"},
      {"gce_long_poll_timeout_s", "Detection"},
      {"heartbeat_interval", "Detection"},
      {"lost_after_intervals", "Detection"},
      {"azure_ack", "Detection"},
      {"replica_id", "Replicas"},
      {"lease", "Replicas"},
      {"notice_signal", "Wrapper"},
      {"notice_file", "Wrapper"},
      {"orphan_grace", "Wrapper"},
      {"profiler", "Samples"},
      {"spool", "Samples"},
      {"batch_interval", "Samples"},
      {"max_batch", "Samples"},
      {"report_deadline", "Samples"},
      {"flush_timeout", "Samples"},
      {"report_interval", "Samples"},
      {"checkpoint_uri", "Checkpoints"},
      {"checkpoint_dir", "Checkpoints"},
      {"checkpoint_interval", "Checkpoints"},
      {"s3_region", "Checkpoints"},
      {"s3_endpoint", "Checkpoints"},
      {"iteration_time_s", "Simulation"},
      {"max_steps", "Simulation"},
      {"metrics_listen", "Metrics"},
  };
  if (absl::StrContains(file, "security_flags")) return "Security";
  if (absl::StrContains(file, "metrics_flags")) return "Metrics";
  auto it = groups->find(name);
  return it != groups->end() ? it->second : "Other";
}

void SetUpProgram(absl::string_view name, absl::string_view usage) {
  ProgramName() = std::string(name);
  absl::FlagsUsageConfig config;
  config.contains_helpshort_flags = IsProgramFlagFile;
  config.contains_help_flags = IsProgramFlagFile;
  config.version_string = [] { return absl::StrCat(ProgramName(), " ", ProjectVersion(), "\n"); };
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
}

std::optional<int> CheckProgramCommandLine(int argc, char** argv, absl::string_view name,
                                           absl::string_view usage, std::ostream& out,
                                           std::ostream& err) {
  auto fail = [&](const std::string& what) {
    err << name << ": " << what << "\n";
    return kExitBadInput;
  };
  bool help = false, help_full = false, version = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") {
      if (i + 1 < argc) {
        return fail(absl::StrCat("unexpected argument \"", argv[i + 1], "\": ", name,
                                 " takes only flags (see --help)"));
      }
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      return fail(absl::StrCat("unexpected argument \"", arg, "\": ", name,
                               " takes only flags (see --help)"));
    }
    absl::string_view body = arg.substr(arg[1] == '-' ? 2 : 1);
    absl::string_view flag_name = body;
    std::optional<absl::string_view> value;
    if (const size_t eq = body.find('='); eq != absl::string_view::npos) {
      flag_name = body.substr(0, eq);
      value = body.substr(eq + 1);
    }
    if (IsHelpFlag(flag_name)) {
      help = true;
      help_full = help_full || flag_name == "helpfull";
      continue;
    }
    if (flag_name == "version") {
      version = true;
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(flag_name);
    if (flag == nullptr && !value && absl::StartsWith(flag_name, "no")) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(flag_name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) continue;  // --noazure_ack
    }
    if (flag == nullptr || flag->IsRetired()) {
      std::vector<std::string> known = {"help", "helpfull", "version"};
      for (const absl::CommandLineFlag* f : ListedFlags(true)) known.emplace_back(f->Name());
      const std::string nearest = NearestName(flag_name, known);
      return fail(absl::StrCat("--", flag_name, ": unknown flag",
                               nearest.empty()
                                   ? absl::StrCat(" (", name, " --help lists its flags)")
                                   : absl::StrCat("; did you mean --", nearest, "?")));
    }
    if (!value && !flag->IsOfType<bool>()) {
      if (i + 1 >= argc) return fail(absl::StrCat("--", flag_name, ": missing its value"));
      value = argv[++i];
    }
    if (value && !ValueParses(*flag, *value)) {
      return fail(absl::StrCat("--", flag_name, "=", *value, ": not ", KindOf(*flag).expected));
    }
  }
  if (help) {
    PrintHelp(name, usage, help_full, out);
    return 0;
  }
  if (version) {
    out << name << " " << ProjectVersion() << "\n";
    return 0;
  }
  return std::nullopt;
}

std::vector<char*> ParseProgramCommandLine(int argc, char** argv, absl::string_view name,
                                           absl::string_view usage) {
  SetUpProgram(name, usage);
  if (std::optional<int> status =
          CheckProgramCommandLine(argc, argv, name, usage, std::cout, std::cerr)) {
    std::cout.flush();
    std::exit(*status);
  }
  return absl::ParseCommandLine(argc, argv);
}

absl::Status CheckStoreFolder(absl::string_view flag, absl::string_view spec) {
  if (absl::StrContains(spec, "://")) return absl::OkStatus();  // postgres://...: not a file
  absl::string_view path = spec;
  absl::ConsumePrefix(&path, "sqlite:");
  if (path.empty() || path == ":memory:") return absl::OkStatus();
  const std::filesystem::path parent = std::filesystem::path(std::string(path)).parent_path();
  if (parent.empty()) return absl::OkStatus();  // the working directory
  std::error_code ec;
  if (std::filesystem::is_directory(parent, ec)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(flag, " = \"", spec, "\": the folder ", parent.string(),
                   std::filesystem::exists(parent, ec) ? " is not a folder" : " does not exist",
                   " (a service creates no folders: create it first)"));
}

}  // namespace spotdnn::services
