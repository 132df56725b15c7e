// spotdnn-provisioner: cheapest plans, re-planning and frontiers as a gRPC service.
#include <string>

#include "absl/flags/flag.h"
#include "services/common/registry_flags.h"
#include "services/provisioner/provisioner_service.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50052",
          "host:port to serve on; port 0 picks a free port (logged, and written to --port_file)");

int main(int argc, char** argv) {
  return spotdnn::services::RegistryServiceMain<spotdnn::services::ProvisionerServiceImpl>(
      argc, argv, "spotdnn-provisioner", "The spotdnn spot instance provisioner (gRPC).",
      FLAGS_listen);
}
