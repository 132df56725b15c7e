#include "services/common/program.h"

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

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

void SetUpProgram(absl::string_view name, absl::string_view usage) {
  ProgramName() = std::string(name);
  absl::FlagsUsageConfig config;
  config.contains_helpshort_flags = IsProgramFlagFile;
  config.contains_help_flags = IsProgramFlagFile;
  config.version_string = [] { return absl::StrCat(ProgramName(), " ", ProjectVersion(), "\n"); };
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
}

std::vector<char*> ParseProgramCommandLine(int argc, char** argv, absl::string_view name,
                                           absl::string_view usage) {
  SetUpProgram(name, usage);
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace spotdnn::services
