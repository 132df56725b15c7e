// The main of a service built from the data registry (the predictor and the provisioner): their
// shared flags (--port_file, --metrics_listen, --catalog_dir, --workload_dir, the server security
// flags) defined once, and the body of main. Each main keeps only its own --listen default and
// usage line.
#ifndef SPOTDNN_SERVICES_COMMON_REGISTRY_FLAGS_H_
#define SPOTDNN_SERVICES_COMMON_REGISTRY_FLAGS_H_

#include <iostream>
#include <string>
#include <utility>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "services/common/metrics_flags.h"
#include "services/common/program.h"
#include "services/common/security_flags.h"
#include "services/common/serve_with_registry.h"

ABSL_DECLARE_FLAG(std::string, port_file);
ABSL_DECLARE_FLAG(std::string, catalog_dir);
ABSL_DECLARE_FLAG(std::string, workload_dir);

namespace spotdnn::services {

// Parses the command line, then serves `Service` (built from the registry) on --listen until
// SIGTERM. Returns main's exit status.
template <typename Service>
int RegistryServiceMain(int argc, char** argv, const std::string& name, const char* usage,
                        const absl::Flag<std::string>& listen) {
  BlockShutdownSignals();
  ParseProgramCommandLine(argc, argv, name, usage);
  return ServeWithRegistry<Service>(name, absl::GetFlag(listen), absl::GetFlag(FLAGS_port_file),
                                    absl::GetFlag(FLAGS_metrics_listen),
                                    absl::GetFlag(FLAGS_catalog_dir),
                                    absl::GetFlag(FLAGS_workload_dir), ServerSecurityFromFlags());
}

// The same for a service that also takes options from its own flags: `options_from_flags()`,
// called once the command line is parsed, returns them (absl::StatusOr), or an error naming the
// flag, which is printed and ends main with status 2.
template <typename Service, typename OptionsFromFlags>
int RegistryServiceMain(int argc, char** argv, const std::string& name, const char* usage,
                        const absl::Flag<std::string>& listen,
                        OptionsFromFlags options_from_flags) {
  BlockShutdownSignals();
  ParseProgramCommandLine(argc, argv, name, usage);
  auto options = options_from_flags();
  if (!options.ok()) {
    std::cerr << name << ": " << options.status().message() << "\n";
    return 2;
  }
  return ServeWithRegistry<Service>(
      name, absl::GetFlag(listen), absl::GetFlag(FLAGS_port_file),
      absl::GetFlag(FLAGS_metrics_listen), absl::GetFlag(FLAGS_catalog_dir),
      absl::GetFlag(FLAGS_workload_dir), ServerSecurityFromFlags(), *std::move(options));
}

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_REGISTRY_FLAGS_H_
