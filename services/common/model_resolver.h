// Turns workload and catalog references of a request into a compiled performance model.
#ifndef SPOTDNN_SERVICES_COMMON_MODEL_RESOLVER_H_
#define SPOTDNN_SERVICES_COMMON_MODEL_RESOLVER_H_

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "predictor/performance_model.h"
#include "services/common/data_registry.h"
#include "spotdnn/v1/predictor.pb.h"

namespace spotdnn::services {

// Resolves workload and catalog references to a compiled PerformanceModel, caching models of
// named (registered) pairs. Thread-safe.
class ModelResolver {
 public:
  explicit ModelResolver(std::shared_ptr<const DataRegistry> registry);

  // INVALID_ARGUMENT for an unset reference or a file path (servers read no user files),
  // NOT_FOUND for an unknown name, and whatever PerformanceModel::Create says.
  absl::StatusOr<std::shared_ptr<const predictor::PerformanceModel>> Resolve(
      const pb::WorkloadRef& workload, const pb::CatalogRef& catalog,
      const predictor::ModelOptions& options = {});

  // The profile and catalog the references name, uncompiled (a synchronous workload is predicted
  // without a PerformanceModel). Errors as Resolve's before it compiles.
  absl::StatusOr<std::pair<pb::WorkloadProfile, pb::InstanceCatalog>> Load(
      const pb::WorkloadRef& workload, const pb::CatalogRef& catalog) const;

  const DataRegistry& registry() const { return *registry_; }

 private:
  std::shared_ptr<const DataRegistry> registry_;
  absl::Mutex mu_;
  // Keyed by workload name, catalog name, bandwidth margin and whether a loss model is required.
  std::map<std::tuple<std::string, std::string, double, bool>,
           std::shared_ptr<const predictor::PerformanceModel>>
      cache_ ABSL_GUARDED_BY(mu_);
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_MODEL_RESOLVER_H_
