// spotdnn-provisioner: cheapest plans, re-planning and frontiers as a gRPC service.
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "services/common/security_flags.h"
#include "services/common/serve_with_registry.h"
#include "services/provisioner/provisioner_service.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50052",
          "host:port to serve on; port 0 picks a free port (logged, and written to --port_file)");
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file once serving");
ABSL_FLAG(std::string, catalog_dir, "", "also serve every *.json catalog in this folder by name");
ABSL_FLAG(std::string, workload_dir, "",
          "also serve every *.json workload profile in this folder by name");
ABSL_FLAG(absl::Duration, max_solve_time, absl::Seconds(60),
          "longest one call's plan search may run, whatever its deadline (a search also stops at "
          "the call's deadline or when the call is cancelled): it then answers DEADLINE_EXCEEDED");

int main(int argc, char** argv) {
  spotdnn::services::BlockShutdownSignals();
  absl::SetProgramUsageMessage("The spotdnn spot instance provisioner (gRPC).");
  absl::ParseCommandLine(argc, argv);
  spotdnn::services::ProvisionerOptions options;
  options.max_solve_time = absl::GetFlag(FLAGS_max_solve_time);
  if (options.max_solve_time <= absl::ZeroDuration()) {
    std::cerr << "--max_solve_time = " << absl::FormatDuration(options.max_solve_time)
              << ": must be positive\n";
    return 2;
  }
  return spotdnn::services::ServeWithRegistry<spotdnn::services::ProvisionerServiceImpl>(
      "spotdnn-provisioner", absl::GetFlag(FLAGS_listen), absl::GetFlag(FLAGS_port_file),
      absl::GetFlag(FLAGS_catalog_dir), absl::GetFlag(FLAGS_workload_dir),
      spotdnn::services::ServerSecurityFromFlags(), options);
}
