// spotdnn: the gateway CLI.
#include <iostream>
#include <string>
#include <vector>

#include "services/gateway/cli/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return spotdnn::gateway::RunCli(args, std::cout, std::cerr);
}
