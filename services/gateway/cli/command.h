// The CLI's command table: every command (and subcommand, "profile import") with its usage, its
// own flags and its handler. The dispatcher accepts only a command's own flags, refuses stray
// arguments, and generates `--help` and `spotdnn help COMMAND` from the table.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_COMMAND_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_COMMAND_H_

#include <functional>
#include <string>
#include <vector>

#include "services/gateway/cli/args.h"
#include "services/gateway/cli/cli.h"

namespace spotdnn::gateway {

// One flag as --help shows it.
struct FlagHelp {
  std::string flag;   // "--loss"
  std::string value;  // "L"; empty for a switch
  std::string help;   // one or more lines
};

// A command, a subcommand ("profile import"), or a group of subcommands (no handler).
struct Command {
  std::string name;
  std::string summary;   // one line, in the list of commands
  std::string synopsis;  // after "Usage: spotdnn NAME "; several lines allowed
  std::string description;
  std::vector<FlagHelp> flags;  // the only flags it takes (--json is always one of them)
  int min_positional = 0;
  int max_positional = 0;                                  // -1: any number
  std::string footer;                                      // e.g. exit statuses
  std::function<int(const Args& args, const Io& io)> run;  // null for a group
};

// Flags many commands share.
FlagHelp JsonFlag();
FlagHelp ServerFlag(const std::string& service);
FlagHelp DataDirFlag();

// The data directory of a command: --data-dir D, else $SPOTDNN_HOME, else ~/.spotdnn (see
// DefaultDataDir in stack.h). Every command that keeps or reads state finds it here: the stack
// (stack.json, logs/), jobs.db, profiles.db, local/ (the local provider's instances).
std::string DataDirOf(const Args& args);

// Every command of every group, in the order `spotdnn help` lists them. Each group is declared
// in its own file.
std::vector<Command> ModelCommands();     // predict, catalogs, workloads (predict_command.cc)
std::vector<Command> PlanCommands();      // plan (plan_command.cc)
std::vector<Command> SimulateCommands();  // simulate (simulate_command.cc)
std::vector<Command> ProfileCommands();   // profile ... (profile_command.cc)
std::vector<Command> WatchCommands();     // watch (watch_command.cc)
std::vector<Command> JobCommands();       // run, jobs, status (job_commands.cc)
std::vector<Command> StackCommands();     // up, down (stack_commands.cc)
std::vector<Command> LocalCommands();     // local ... (local_commands.cc)
std::vector<Command> CatalogCommands();   // catalog ... (catalog_commands.cc)
std::vector<Command> DetectorCommands();  // detector ... (detector_commands.cc)
const std::vector<Command>& CommandTable();

// The page of the manual that documents a command or group, relative to the checkout:
// "docs/planning.md" for "plan". Every command has one.
std::string ManualPage(const std::string& command_name);

// The --help text of a command or group; its last line names the command's page of the manual.
std::string HelpText(const Command& command);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_COMMAND_H_
