// What every spotdnn program (the four services, spotdnn-agent, spotdnn-metadata-emulator,
// spotdnn-sim-worker) does with its command line before anything else: `--help` lists all of the
// program's own flags (absl's default lists only flags defined in a file named after the program,
// so our mains answered "No flags matched"), `--version` prints "NAME VERSION", and the usage
// message names the program.
#ifndef SPOTDNN_SERVICES_COMMON_PROGRAM_H_
#define SPOTDNN_SERVICES_COMMON_PROGRAM_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace spotdnn::services {

// The project's version (CMake's PROJECT_VERSION), e.g. "0.1.0".
absl::string_view ProjectVersion();

// Whether `--help` lists the flags defined in `file` (a source path as absl reports it): every
// file of this project (services/, detector/, provisioner/, ...), none of Abseil's own.
bool IsProgramFlagFile(absl::string_view file);

// Sets the usage message ("NAME: USAGE") and the flags usage config (the help filters above,
// `--version` as "NAME VERSION"). Call before absl::ParseCommandLine.
void SetUpProgram(absl::string_view name, absl::string_view usage);

// SetUpProgram, then absl::ParseCommandLine: the arguments left over (argv[0] first).
std::vector<char*> ParseProgramCommandLine(int argc, char** argv, absl::string_view name,
                                           absl::string_view usage);

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_PROGRAM_H_
