// spotdnn-provisioner: cheapest plans, re-planning and frontiers as a gRPC service.
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "services/common/registry_flags.h"
#include "services/provisioner/provisioner_service.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50052",
          "host:port to serve on; port 0 picks a free port (logged, and written to --port_file)");
ABSL_FLAG(absl::Duration, max_solve_time, absl::Seconds(60),
          "longest one call's plan search may run, whatever its deadline (a search also stops at "
          "the call's deadline or when the call is cancelled): it then answers DEADLINE_EXCEEDED");

int main(int argc, char** argv) {
  return spotdnn::services::RegistryServiceMain<spotdnn::services::ProvisionerServiceImpl>(
      argc, argv, "spotdnn-provisioner", "The spotdnn spot instance provisioner (gRPC).",
      FLAGS_listen, []() -> absl::StatusOr<spotdnn::services::ProvisionerOptions> {
        spotdnn::services::ProvisionerOptions options;
        options.max_solve_time = absl::GetFlag(FLAGS_max_solve_time);
        if (options.max_solve_time <= absl::ZeroDuration()) {
          return absl::InvalidArgumentError(
              absl::StrCat("--max_solve_time = ", absl::FormatDuration(options.max_solve_time),
                           ": must be positive"));
        }
        return options;
      });
}
