// spotdnn-predictor: the performance model as a gRPC service.
#include <string>

#include "absl/flags/flag.h"
#include "services/common/registry_flags.h"
#include "services/predictor/predictor_service.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "host:port to serve on; port 0 picks a free port (logged, and written to --port_file)");

int main(int argc, char** argv) {
  return spotdnn::services::RegistryServiceMain<spotdnn::services::PredictorServiceImpl>(
      argc, argv, "spotdnn-predictor", "The spotdnn training-performance predictor (gRPC).",
      FLAGS_listen);
}
