// `spotdnn up` and `spotdnn down`: the four services (and the metadata emulator) on this machine.
#include "absl/strings/str_cat.h"
#include "services/gateway/cli/cli.h"
#include "services/gateway/cli/command.h"
#include "services/gateway/cli/output.h"
#include "services/gateway/cli/stack.h"

namespace spotdnn::gateway {
namespace {

std::string DataDir(const Args& args) { return args.Get("--data-dir").value_or(DefaultDataDir()); }

int Up(const Args& args, const Io& io) {
  const std::string data_dir = DataDir(args);
  const std::string bin_dir = args.Get("--bin-dir").value_or(SelfDir());
  if (!io.json) io.out << "Starting the spotdnn stack in " << data_dir << ":" << std::endl;
  auto stack = StartStack(data_dir, bin_dir, io.json ? nullptr : &io.out);
  if (!stack.ok()) return ReportError(stack.status(), "up", io);
  if (io.json) {
    io.out << JsonObject()
                  .String("data_dir", stack->data_dir)
                  .String("predictor", stack->predictor)
                  .String("provisioner", stack->provisioner)
                  .String("profiler", stack->profiler)
                  .String("detector", stack->detector)
                  .String("metadata_emulator", stack->emulator)
                  .str()
           << std::endl;
  } else {
    io.out << "Up: predictor " << stack->predictor << ", provisioner " << stack->provisioner
           << ", profiler " << stack->profiler << ", detector " << stack->detector
           << ", metadata emulator " << stack->emulator << "\n(logs in " << data_dir
           << "/logs; stop with `spotdnn down`)" << std::endl;
  }
  return kExitOk;
}

int Down(const Args& args, const Io& io) {
  absl::Status s = StopStack(DataDir(args));
  if (!s.ok()) return ReportError(s, "down", io);
  if (io.json) {
    io.out << JsonObject().Bool("stopped", true).str() << std::endl;
  } else {
    io.out << "Stopped the spotdnn stack in " << DataDir(args) << "." << std::endl;
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
      "already up.\ndown stops them.";
  return {
      {.name = "up",
       .summary = "start the four services (and the local metadata emulator) on this machine",
       .synopsis = "[--data-dir D] [--bin-dir B] [--json]",
       .description = description,
       .flags = {DataDirFlag(),
                 {"--bin-dir", "B", "where the binaries are (default: beside this spotdnn)"}},
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
