// What every spotdnn program (the four services, spotdnn-agent, spotdnn-metadata-emulator,
// spotdnn-sim-worker) does with its command line before anything else, as the `spotdnn` CLI does:
// only its own flags and no positional argument; an unknown flag (with the nearest known one as a
// hint: "--lisen: unknown flag; did you mean --listen?"), a bad value (a duration without its
// unit) or a stray argument is exit status 2 with one line naming it; `--help` lists the
// program's own flags grouped by purpose ("Serving", "Security", "Metrics", "Store", ...) and
// exits 0; `--version` prints "NAME VERSION".
#ifndef SPOTDNN_SERVICES_COMMON_PROGRAM_H_
#define SPOTDNN_SERVICES_COMMON_PROGRAM_H_

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace spotdnn::services {

// The exit statuses of every spotdnn program (README, "Exit status").
inline constexpr int kExitBadInput = 2;

// The project's version (CMake's PROJECT_VERSION), e.g. "0.1.0".
absl::string_view ProjectVersion();

// Whether `--help` lists the flags defined in `file` (a source path as absl reports it): every
// file of this project (services/, detector/, provisioner/, ...), none of Abseil's own.
bool IsProgramFlagFile(absl::string_view file);

// The name of `candidates` nearest `typed` (edit distance, a swap of two neighbours counting
// one), or "" when none is near enough to be a likely typo.
std::string NearestName(absl::string_view typed, const std::vector<std::string>& candidates);

// The group `--help` lists flag `name` (defined in `file`) under: its purpose, e.g. "Serving".
std::string FlagGroup(absl::string_view name, absl::string_view file);

// Sets the usage message ("NAME: USAGE") and the flags usage config (the help filters above,
// `--version` as "NAME VERSION"). Called by ParseProgramCommandLine.
void SetUpProgram(absl::string_view name, absl::string_view usage);

// Checks argv[1..argc) against the program's registered flags without setting any. Returns the
// exit status when the program should stop here: 0 after printing --help or --version to `out`,
// 2 after printing "NAME: WHAT" to `err` (unknown flag, bad value, stray argument).
std::optional<int> CheckProgramCommandLine(int argc, char** argv, absl::string_view name,
                                           absl::string_view usage, std::ostream& out,
                                           std::ostream& err);

// SetUpProgram, CheckProgramCommandLine (exiting with its status), then absl::ParseCommandLine.
// Returns argv[0] (every other argument was a flag).
std::vector<char*> ParseProgramCommandLine(int argc, char** argv, absl::string_view name,
                                           absl::string_view usage);

// A SQLite store's file must be in an existing folder: a service never creates folders (systemd's
// StateDirectory, the container's volume or `spotdnn up` make them), so a typo in --db does not
// become a new tree. `flag` is what set it ("--db", "--store"); `spec` is a path, "sqlite:PATH"
// or another backend's URI (not checked). INVALID_ARGUMENT naming the flag and the folder.
absl::Status CheckStoreFolder(absl::string_view flag, absl::string_view spec);

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_PROGRAM_H_
