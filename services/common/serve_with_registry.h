// Definition of ServeWithRegistry (server.h), for service mains.
#ifndef SPOTDNN_SERVICES_COMMON_SERVE_WITH_REGISTRY_H_
#define SPOTDNN_SERVICES_COMMON_SERVE_WITH_REGISTRY_H_

#include <memory>
#include <string>
#include <utility>

#include "services/common/data_registry.h"
#include "services/common/server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace spotdnn::services {

template <typename Service, typename... Args>
int ServeWithRegistry(const std::string& service_name, const std::string& listen,
                      const std::string& port_file, const std::string& metrics_listen,
                      const std::string& catalog_dir, const std::string& workload_dir,
                      const ServerSecurity& security, Args&&... args) {
  auto logger = spdlog::get(service_name);
  if (!logger) logger = spdlog::stderr_color_mt(service_name);
  auto loaded = DataRegistry::WithBuiltinsAndDirs(catalog_dir, workload_dir);
  if (!loaded.ok()) {
    logger->error("{}", std::string(loaded.status().message()));
    return 2;
  }
  auto registry = std::make_shared<DataRegistry>(*std::move(loaded));
  logger->info("{} catalogs, {} workloads", registry->catalogs().size(),
               registry->workloads().size());
  Service service(registry, std::forward<Args>(args)...);
  return ServeUntilSignal(service_name, listen, port_file, metrics_listen, {&service}, security);
}

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_SERVE_WITH_REGISTRY_H_
