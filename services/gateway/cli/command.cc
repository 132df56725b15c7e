#include "services/gateway/cli/command.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "services/gateway/cli/stack.h"

namespace spotdnn::gateway {

FlagHelp JsonFlag() { return {"--json", "", "print JSON (one object, or one per event)"}; }

FlagHelp ServerFlag(const std::string& service) {
  return {"--server", "HOST:PORT",
          absl::StrCat("use a running ", service, " instead of the in-process one")};
}

FlagHelp DataDirFlag() {
  return {"--data-dir", "D",
          "the data directory: the stack, jobs.db, profiles.db, local/ (default\n"
          "$SPOTDNN_HOME, else ~/.spotdnn)"};
}

std::string DataDirOf(const Args& args) {
  return args.Get("--data-dir").value_or(DefaultDataDir());
}

const std::vector<Command>& CommandTable() {
  static const std::vector<Command>* table = [] {
    auto* all = new std::vector<Command>;
    for (auto group :
         {ModelCommands, PlanCommands, SimulateCommands, ProfileCommands, WatchCommands,
          DetectorCommands, JobCommands, StackCommands, LocalCommands, CatalogCommands}) {
      for (Command& c : group()) {
        if (c.run && std::none_of(c.flags.begin(), c.flags.end(),
                                  [](const FlagHelp& f) { return f.flag == "--json"; })) {
          c.flags.push_back(JsonFlag());
        }
        all->push_back(std::move(c));
      }
    }
    return all;
  }();
  return *table;
}

std::string ManualPage(const std::string& command_name) {
  // A subcommand's own page where it has one, else its group's.
  struct Page {
    const char* command;
    const char* page;
  };
  static constexpr Page kPages[] = {
      {"predict", "docs/planning.md"},
      {"catalogs", "docs/planning.md"},
      {"workloads", "docs/planning.md"},
      {"plan", "docs/planning.md"},
      {"simulate", "docs/simulation.md"},
      {"profile validate-convergence", "docs/convergence.md"},
      {"profile", "docs/profiling.md"},
      {"watch", "docs/detector.md"},
      {"detector", "docs/detector.md"},
      {"run", "docs/jobs.md"},
      {"jobs", "docs/jobs.md"},
      {"status", "docs/jobs.md"},
      {"up", "docs/jobs.md"},
      {"down", "docs/jobs.md"},
      {"local", "docs/providers.md"},
      {"catalog hazards", "docs/simulation.md"},
      {"catalog", "docs/providers.md"},
  };
  const std::string group = command_name.substr(0, command_name.find(' '));
  for (const std::string& name : {command_name, group}) {
    for (const Page& p : kPages) {
      if (name == p.command) return p.page;
    }
  }
  return "README.md";
}

std::string HelpText(const Command& command) {
  std::string text = absl::StrCat("Usage: spotdnn ", command.name);
  if (!command.run) {
    absl::StrAppend(&text, " SUBCOMMAND [FLAGS]\n");
  } else {
    // A synopsis of several lines is indented under its first.
    const std::string indent(absl::StrCat("Usage: spotdnn ", command.name, " ").size(), ' ');
    bool first = true;
    for (absl::string_view line : absl::StrSplit(command.synopsis, '\n')) {
      absl::StrAppend(&text, first ? " " : indent, line, "\n");
      first = false;
    }
  }
  if (!command.description.empty()) absl::StrAppend(&text, "\n", command.description, "\n");
  if (!command.run) {
    absl::StrAppend(&text, "\nSubcommands:\n");
    // One column for the summaries, two spaces past the longest name (16 at least).
    size_t column = 16;
    for (const Command& c : CommandTable()) {
      if (!absl::StartsWith(c.name, command.name + " ")) continue;
      column = std::max(column, c.name.size() - command.name.size() - 1 + 2);
    }
    for (const Command& c : CommandTable()) {
      if (!absl::StartsWith(c.name, command.name + " ")) continue;
      std::string name = c.name.substr(command.name.size() + 1);
      name.resize(column, ' ');
      absl::StrAppend(&text, "  ", name, c.summary, "\n");
    }
    absl::StrAppend(&text, "\n`spotdnn ", command.name,
                    " SUBCOMMAND --help` shows a subcommand's flags.\n");
    absl::StrAppend(&text, "\nManual: ", ManualPage(command.name), "\n");
    return text;
  }
  if (!command.flags.empty()) {
    absl::StrAppend(&text, "\nFlags:\n");
    for (const FlagHelp& f : command.flags) {
      std::string head = f.value.empty() ? f.flag : absl::StrCat(f.flag, " ", f.value);
      bool first = true;
      for (absl::string_view line : absl::StrSplit(f.help, '\n')) {
        std::string left = first ? head : "";
        if (first && left.size() > 22) {
          absl::StrAppend(&text, "  ", left, "\n");
          left.clear();
        }
        left.resize(22, ' ');
        absl::StrAppend(&text, "  ", left, " ", line, "\n");
        first = false;
      }
    }
  }
  if (!command.footer.empty()) absl::StrAppend(&text, "\n", command.footer, "\n");
  absl::StrAppend(&text, "\nManual: ", ManualPage(command.name), "\n");
  return text;
}

}  // namespace spotdnn::gateway
