#include "tests/deploy/deploy_files.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace spotdnn::deploy_test {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string K8sObject::Where() const { return absl::StrCat(file, ": ", kind, "/", name); }

YAML::Node At(const YAML::Node& node, const std::vector<std::string>& path) {
  YAML::Node current = node;
  for (const std::string& step : path) {
    if (!current.IsMap() || !current[step]) return YAML::Node(YAML::NodeType::Undefined);
    current.reset(current[step]);  // operator= would overwrite the node `current` refers to
  }
  return current;
}

std::string ScalarAt(const YAML::Node& node, const std::vector<std::string>& path) {
  YAML::Node value = At(node, path);
  return value.IsScalar() ? value.as<std::string>() : "";
}

int IntAt(const YAML::Node& node, const std::vector<std::string>& path) {
  int value = -1;
  return absl::SimpleAtoi(ScalarAt(node, path), &value) ? value : -1;
}

std::map<std::string, std::string> StringMap(const YAML::Node& node) {
  std::map<std::string, std::string> result;
  if (!node.IsMap()) return result;
  for (const auto& entry : node) {
    result[entry.first.as<std::string>()] =
        entry.second.IsScalar() ? entry.second.as<std::string>() : "";
  }
  return result;
}

std::vector<std::string> SplitWords(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (char c : line) {
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        word += c;
      }
    } else if (c == '"' || c == '\'') {
      quote = c;
      in_word = true;
    } else if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(word);
  return words;
}

std::vector<std::pair<std::string, std::string>> FlagsOf(const std::vector<std::string>& words) {
  std::vector<std::pair<std::string, std::string>> flags;
  for (const std::string& word : words) {
    absl::string_view rest = word;
    if (!absl::ConsumePrefix(&rest, "--")) continue;
    std::vector<std::string> parts = absl::StrSplit(rest, absl::MaxSplits('=', 1));
    flags.emplace_back(parts[0], parts.size() > 1 ? parts[1] : "");
  }
  return flags;
}

std::optional<std::string> FlagValue(const std::vector<std::string>& words,
                                     const std::string& name) {
  for (const auto& [flag, value] : FlagsOf(words)) {
    if (flag == name) return value;
  }
  return std::nullopt;
}

int PortOf(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return -1;
  int port = -1;
  return absl::SimpleAtoi(host_port.substr(colon + 1), &port) ? port : -1;
}

ProgramFlags HelpFlags(const std::string& program_path) {
  ProgramFlags flags;
  if (!std::filesystem::exists(program_path)) return flags;
  const CommandResult help = RunCommand("'" + program_path + "' --helpfull");
  // The programs' --helpfull (services/common/program.cc) prints "  --name=KIND" (or "  --name"
  // for a bool), then its help indented by six spaces and ending "(default: VALUE)" (a string's
  // VALUE in double quotes); the entry of a flag runs until the next flag's line.
  static const std::regex kFlagLine(R"(^  --([A-Za-z0-9_]+)(=\S+)?$)");
  static const std::regex kDefault(R"re(\(default: (?:"([^"]*)"|([^)]*))\)\s*$)re");
  std::string name, entry;
  auto finish = [&] {
    if (name.empty()) return;
    std::smatch m;
    flags.defaults[name] =
        std::regex_search(entry, m, kDefault) ? (m[1].matched ? m[1].str() : m[2].str()) : "";
  };
  for (absl::string_view line : absl::StrSplit(help.output, '\n')) {
    const std::string text(line);
    std::smatch m;
    if (std::regex_search(text, m, kFlagLine)) {
      finish();
      name = m[1];
      entry = text;
    } else if (!name.empty() && absl::StartsWith(text, "      ")) {
      entry += " " + std::string(absl::StripAsciiWhitespace(text));
    }
  }
  finish();
  flags.ran = !flags.defaults.empty();
  return flags;
}

UnitFile ParseUnit(const std::string& text) {
  UnitFile unit;
  std::string section;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = std::string(line.substr(1, line.size() - 2));
      continue;
    }
    std::vector<std::string> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    if (kv.size() != 2) continue;
    unit[section].emplace_back(std::string(absl::StripAsciiWhitespace(kv[0])),
                               std::string(absl::StripAsciiWhitespace(kv[1])));
  }
  return unit;
}

std::vector<std::string> UnitValues(const UnitFile& unit, const std::string& section,
                                    const std::string& key) {
  std::vector<std::string> values;
  auto it = unit.find(section);
  if (it == unit.end()) return values;
  for (const auto& [k, v] : it->second) {
    if (k == key) values.push_back(v);
  }
  return values;
}

std::vector<std::string> ExpandedExecStart(const UnitFile& unit) {
  std::map<std::string, std::string> env;
  for (const std::string& assignment : UnitValues(unit, "Service", "Environment")) {
    std::vector<std::string> kv = absl::StrSplit(assignment, absl::MaxSplits('=', 1));
    env[kv[0]] = kv.size() > 1 ? kv[1] : "";
  }
  const std::vector<std::string> exec = UnitValues(unit, "Service", "ExecStart");
  if (exec.empty()) return {};
  static const std::regex kBraced(R"(\$\{([A-Za-z_][A-Za-z0-9_]*)\})");
  static const std::regex kBare(R"(^\$([A-Za-z_][A-Za-z0-9_]*)$)");
  std::vector<std::string> words;
  for (const std::string& word : SplitWords(exec.back())) {
    std::smatch m;
    if (std::regex_match(word, m, kBare)) {
      for (const std::string& w : SplitWords(env[m[1]])) words.push_back(w);
      continue;
    }
    std::string expanded;
    auto begin = std::sregex_iterator(word.begin(), word.end(), kBraced);
    size_t last = 0;
    for (auto it = begin; it != std::sregex_iterator(); ++it) {
      expanded += word.substr(last, it->position() - last) + env[(*it)[1]];
      last = it->position() + it->length();
    }
    words.push_back(expanded + word.substr(last));
  }
  return words;
}

std::vector<DockerStage> ParseDockerfile(const std::string& text) {
  std::vector<DockerStage> stages;
  std::string pending;
  auto flush = [&] {
    const std::string line(absl::StripAsciiWhitespace(pending));
    pending.clear();
    if (line.empty()) return;
    const size_t space = line.find_first_of(" \t");
    DockerInstruction instruction{
        absl::AsciiStrToUpper(line.substr(0, space)),
        space == absl::string_view::npos
            ? ""
            : std::string(absl::StripAsciiWhitespace(line.substr(space)))};
    if (instruction.op == "FROM") {
      std::vector<std::string> words = SplitWords(instruction.args);
      DockerStage stage;
      stage.image = words.empty() ? "" : words[0];
      if (words.size() == 3 && absl::AsciiStrToUpper(words[1]) == "AS") stage.name = words[2];
      stages.push_back(stage);
    } else if (!stages.empty()) {
      stages.back().instructions.push_back(instruction);
    }
  };
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    absl::string_view line = absl::StripTrailingAsciiWhitespace(raw);
    if (pending.empty() && absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "#")) continue;
    if (absl::ConsumeSuffix(&line, "\\")) {
      absl::StrAppend(&pending, line, " ");
      continue;
    }
    absl::StrAppend(&pending, line);
    flush();
  }
  flush();
  return stages;
}

std::set<std::string> CMakeExecutables(const std::string& source_dir) {
  std::set<std::string> names;
  static const std::regex kAddExecutable(R"(add_executable\(\s*([A-Za-z0-9_.+-]+))");
  const std::filesystem::path root(source_dir);
  for (auto it = std::filesystem::recursive_directory_iterator(root);
       it != std::filesystem::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory() && (absl::StartsWith(name, "build") || absl::StartsWith(name, "."))) {
      it.disable_recursion_pending();
      continue;
    }
    if (name != "CMakeLists.txt") continue;
    const std::string text = ReadFile(it->path().string());
    for (auto m = std::sregex_iterator(text.begin(), text.end(), kAddExecutable);
         m != std::sregex_iterator(); ++m) {
      names.insert((*m)[1]);
    }
  }
  return names;
}

}  // namespace spotdnn::deploy_test
