// The single-machine stack: `spotdnn up` starts the four services (and the metadata emulator the
// local provider's instances read their revocation notices from) as background processes on
// loopback ports, with their databases and logs under one data directory; `spotdnn down` stops
// them. Other commands find them through DATA_DIR/stack.json.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_STACK_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_STACK_H_

#include <sys/types.h>

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace spotdnn::gateway {

// Where a running stack answers.
struct Stack {
  std::string data_dir;
  std::string predictor;              // host:port
  std::string provisioner;            // host:port
  std::string profiler;               // host:port
  std::string detector;               // host:port
  std::string emulator;               // http://host:port
  std::map<std::string, pid_t> pids;  // binary name -> pid
};

// The data directory: $SPOTDNN_HOME, else ~/.spotdnn, else ./.spotdnn.
std::string DefaultDataDir();

// Reads DATA_DIR/stack.json. NOT_FOUND when there is none (the stack is not up), DATA_LOSS when
// it cannot be parsed.
absl::StatusOr<Stack> ReadStack(const std::string& data_dir);

// Starts the stack from the binaries in `bin_dir`, waiting until each one serves (or reporting
// the end of its log when it does not). A stack already up is returned as it is.
// `progress` gets one line per service as it comes up.
absl::StatusOr<Stack> StartStack(const std::string& data_dir, const std::string& bin_dir,
                                 std::ostream* progress);

// Stops a stack (SIGTERM, then SIGKILL after 10 s) and removes stack.json. NOT_FOUND when none.
absl::Status StopStack(const std::string& data_dir);

// The folder holding the running executable (where the service binaries are built or installed).
std::string SelfDir();

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_STACK_H_
