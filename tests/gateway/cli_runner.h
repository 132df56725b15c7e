// Runs the spotdnn CLI in-process for tests and captures what it printed.
#ifndef SPOTDNN_TESTS_GATEWAY_CLI_RUNNER_H_
#define SPOTDNN_TESTS_GATEWAY_CLI_RUNNER_H_

#include <sstream>
#include <string>
#include <vector>

#include "services/gateway/cli/cli.h"

namespace spotdnn::gateway {

// The exit status and output of one `spotdnn ARGS...`.
struct CliRun {
  int code;
  std::string out;
  std::string err;
};

inline CliRun Cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = RunCli(args, out, err);
  return {code, out.str(), err.str()};
}

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_TESTS_GATEWAY_CLI_RUNNER_H_
