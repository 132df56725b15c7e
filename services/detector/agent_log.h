// The logger of spotdnn-agent's parts (the instance wrapper's files share it).
#ifndef SPOTDNN_SERVICES_DETECTOR_AGENT_LOG_H_
#define SPOTDNN_SERVICES_DETECTOR_AGENT_LOG_H_

#include <memory>

#include "spdlog/spdlog.h"

namespace spotdnn::services {

// The "spotdnn-agent" logger when the program made one, else spdlog's default.
inline std::shared_ptr<spdlog::logger> AgentLogger() {
  auto logger = spdlog::get("spotdnn-agent");
  return logger ? logger : spdlog::default_logger();
}

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_DETECTOR_AGENT_LOG_H_
