// --metrics_listen, defined once for every service main (see ServeUntilSignal).
#ifndef SPOTDNN_SERVICES_COMMON_METRICS_FLAGS_H_
#define SPOTDNN_SERVICES_COMMON_METRICS_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, metrics_listen);

#endif  // SPOTDNN_SERVICES_COMMON_METRICS_FLAGS_H_
