// The flag metrics_flags.h declares.
#include "services/common/metrics_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on (GET /metrics; port 0 picks a free port, "
          "logged); none by default");
