// spotdnn-predictor: the performance model as a gRPC service.
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "services/common/security_flags.h"
#include "services/common/serve_with_registry.h"
#include "services/predictor/predictor_service.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "host:port to serve on; port 0 picks a free port (logged, and written to --port_file)");
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file once serving");
ABSL_FLAG(std::string, catalog_dir, "", "also serve every *.json catalog in this folder by name");
ABSL_FLAG(std::string, workload_dir, "",
          "also serve every *.json workload profile in this folder by name");

int main(int argc, char** argv) {
  spotdnn::services::BlockShutdownSignals();
  absl::SetProgramUsageMessage("The spotdnn training-performance predictor (gRPC).");
  absl::ParseCommandLine(argc, argv);
  return spotdnn::services::ServeWithRegistry<spotdnn::services::PredictorServiceImpl>(
      "spotdnn-predictor", absl::GetFlag(FLAGS_listen), absl::GetFlag(FLAGS_port_file),
      absl::GetFlag(FLAGS_catalog_dir), absl::GetFlag(FLAGS_workload_dir),
      spotdnn::services::ServerSecurityFromFlags());
}
