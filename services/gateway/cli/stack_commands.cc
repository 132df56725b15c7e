// `spotdnn up` and `spotdnn down`: the four services (and the metadata emulator) on this machine.
#include "absl/strings/str_cat.h"
#include "services/gateway/cli/cli.h"
#include "services/gateway/cli/command.h"
#include "services/gateway/cli/output.h"
#include "services/gateway/cli/stack.h"

namespace spotdnn::gateway {
namespace {

int Up(const Args& args, const Io& io) {
  const std::string data_dir = DataDirOf(args);
  const std::string bin_dir = args.Get("--bin-dir").value_or(SelfDir());
  const StackOptions options{.store = args.Get("--store").value_or("")};
  // Checked before anything is printed or started (StartStack checks it again).
  if (args.Get("--store").has_value()) {
    if (auto uri = StackStoreUri(options.store); !uri.ok()) {
      return ReportError(uri.status(), "up", io);
    }
  }
  auto stack = StartStack(data_dir, bin_dir, io.json ? nullptr : &io.out, options);
  if (!stack.ok()) return ReportError(stack.status(), "up", io);
  if (io.json) {
    io.out << JsonObject()
                  .String("data_dir", stack->data_dir)
                  .String("predictor", stack->predictor)
                  .String("provisioner", stack->provisioner)
                  .String("profiler", stack->profiler)
                  .String("detector", stack->detector)
                  .String("metadata_emulator", stack->emulator)
                  .String("store", stack->store)
                  .Bool("already_up", stack->already_up)
                  .str()
           << std::endl;
  } else {
    io.out << (stack->already_up ? "Already up in " + data_dir + ", nothing started: predictor "
                                 : std::string("Up: predictor "))
           << stack->predictor << ", provisioner " << stack->provisioner << ", profiler "
           << stack->profiler << ", detector " << stack->detector << ", metadata emulator "
           << stack->emulator << "\n";
    if (!stack->store.empty()) {
      io.out << "Store: " << stack->store
             << " (profiler and detector; jobs too with `spotdnn run --store " << stack->store
             << "`)\n";
    }
    io.out << "(logs in " << data_dir << "/logs; stop with `spotdnn down`)" << std::endl;
  }
  return kExitOk;
}

int Down(const Args& args, const Io& io) {
  const std::string data_dir = DataDirOf(args);
  absl::Status s = StopStack(data_dir);
  // Nothing up is what `down` is for: say so, and succeed.
  const bool was_up = !absl::IsNotFound(s);
  if (!s.ok() && was_up) return ReportError(s, "down", io);
  if (io.json) {
    io.out << JsonObject().Bool("stopped", was_up).String("data_dir", data_dir).str() << std::endl;
  } else if (was_up) {
    io.out << "Stopped the spotdnn stack in " << data_dir << "." << std::endl;
  } else {
    io.out << "No spotdnn stack is up in " << data_dir << "; nothing to stop." << std::endl;
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> StackCommands() {
  const std::string description =
      "up starts spotdnn-predictor, spotdnn-provisioner, spotdnn-profiler, spotdnn-detector and "
      "the\nmetadata emulator the local provider's instances use, on free 127.0.0.1 ports, in "
      "the\nbackground, with their databases and logs under DATA_DIR (default $SPOTDNN_HOME, "
      "else\n~/.spotdnn); it writes DATA_DIR/stack.json and does nothing when the stack is "
      "already up.\nWith --store the profiler and detector use that existing PostgreSQL database "
      "instead of\nSQLite files (the password from PGPASSFILE, ~/.pgpass or PGPASSWORD; `up` "
      "starts no\ndatabase server).\ndown stops them (exit status 0 also when none is up).";
  return {
      {.name = "up",
       .summary = "start the four services (and the local metadata emulator) on this machine",
       .synopsis = "[--data-dir D] [--bin-dir B] [--store postgres://USER@HOST:PORT/DB] [--json]",
       .description = description,
       .flags = {DataDirFlag(),
                 {"--bin-dir", "B", "where the binaries are (default: beside this spotdnn)"},
                 {"--store", "URI",
                  "an existing PostgreSQL database for the profiler and detector (a libpq\n"
                  "URI without password; default: a SQLite file each in DATA_DIR)"}},
       .run = Up},
      {.name = "down",
       .summary = "stop what `spotdnn up` started",
       .synopsis = "[--data-dir D] [--json]",
       .description = description,
       .flags = {DataDirFlag()},
       .run = Down},
  };
}

}  // namespace spotdnn::gateway
