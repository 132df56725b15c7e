// Readers for the deploy/ files the deploy test checks: Kubernetes manifests, systemd units, the
// Dockerfile, shell command lines and the flags a built program accepts.
#ifndef SPOTDNN_TESTS_DEPLOY_DEPLOY_FILES_H_
#define SPOTDNN_TESTS_DEPLOY_DEPLOY_FILES_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "yaml-cpp/yaml.h"

namespace spotdnn::deploy_test {

// The whole content of `path` ("" when it cannot be read).
std::string ReadFile(const std::string& path);

// The exit status and the combined stdout and stderr of `command` run by /bin/sh.
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult RunCommand(const std::string& command);

// One object of a multi-document manifest file, e.g. "detector.yaml: StatefulSet/spotdnn-detector".
struct K8sObject {
  std::string file;
  std::string kind;
  std::string name;
  YAML::Node node;
  // "FILE: KIND/NAME", for failure messages.
  std::string Where() const;
};

// The node at `path` below `node`, or an undefined node when a step is missing.
YAML::Node At(const YAML::Node& node, const std::vector<std::string>& path);
// The scalar at `path` as a string, "" when missing.
std::string ScalarAt(const YAML::Node& node, const std::vector<std::string>& path);

// The integer scalar at `path` (-1 when missing or not an integer).
int IntAt(const YAML::Node& node, const std::vector<std::string>& path);

// A map node of string scalars as a std::map (empty when not a map).
std::map<std::string, std::string> StringMap(const YAML::Node& node);

// A command line split into words as a POSIX shell would for plain words and quotes (no expansion).
std::vector<std::string> SplitWords(const std::string& line);

// The flags of a command line: "--name=value" or "--name" -> {name, value}.
std::vector<std::pair<std::string, std::string>> FlagsOf(const std::vector<std::string>& words);
// The value of flag `name` in `words`, if given.
std::optional<std::string> FlagValue(const std::vector<std::string>& words,
                                     const std::string& name);
// The port of "host:port" (-1 when there is none).
int PortOf(const std::string& host_port);

// The flags a program accepts and their defaults, from its --helpfull output.
struct ProgramFlags {
  bool ran = false;                             // false when the program could not be run
  std::map<std::string, std::string> defaults;  // flag name -> default as printed (unquoted)
};
ProgramFlags HelpFlags(const std::string& program_path);

// A systemd unit file: section -> [(key, value)] in file order (comments and blanks dropped).
using UnitFile = std::map<std::string, std::vector<std::pair<std::string, std::string>>>;
UnitFile ParseUnit(const std::string& text);
// The values of `key` in `section`, in order.
std::vector<std::string> UnitValues(const UnitFile& unit, const std::string& section,
                                    const std::string& key);
// The unit's ExecStart with its Environment= defaults expanded as systemd does: "${VAR}" stays one
// word, "$VAR" splits into words.
std::vector<std::string> ExpandedExecStart(const UnitFile& unit);

// One Dockerfile instruction (continuation lines joined), e.g. {"COPY", "--from=build a b /x/"}.
struct DockerInstruction {
  std::string op;  // upper case
  std::string args;
};
// A build stage: its FROM image, its name (AS ...) and its instructions after FROM.
struct DockerStage {
  std::string image;
  std::string name;
  std::vector<DockerInstruction> instructions;
};
std::vector<DockerStage> ParseDockerfile(const std::string& text);

// The names given to add_executable() in every CMakeLists.txt under `source_dir`.
std::set<std::string> CMakeExecutables(const std::string& source_dir);

}  // namespace spotdnn::deploy_test

#endif  // SPOTDNN_TESTS_DEPLOY_DEPLOY_FILES_H_
