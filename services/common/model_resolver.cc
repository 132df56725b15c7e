#include "services/common/model_resolver.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "services/common/convert.h"

namespace spotdnn::services {

ModelResolver::ModelResolver(std::shared_ptr<const DataRegistry> registry)
    : registry_(std::move(registry)) {}

absl::StatusOr<std::shared_ptr<const predictor::PerformanceModel>> ModelResolver::Resolve(
    const pb::WorkloadRef& workload, const pb::CatalogRef& catalog,
    const predictor::ModelOptions& options) {
  if (workload.ref_case() == pb::WorkloadRef::REF_NOT_SET) {
    return absl::InvalidArgumentError("workload: set name or profile");
  }
  if (catalog.ref_case() == pb::CatalogRef::REF_NOT_SET) {
    return absl::InvalidArgumentError("catalog: set name or catalog");
  }
  const bool named = workload.has_name() && catalog.has_name();
  const std::tuple<std::string, std::string, double, bool> key(
      workload.name(), catalog.name(), options.bandwidth_margin, options.require_loss_model);
  if (named) {
    absl::MutexLock lock(&mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  }
  auto loaded = Load(workload, catalog);
  if (!loaded.ok()) return loaded.status();
  const auto& [profile, instance_catalog] = *loaded;
  auto model =
      predictor::PerformanceModel::Create(ToDomain(profile), ToDomain(instance_catalog), options);
  if (!model.ok()) return model.status();
  auto shared = std::make_shared<const predictor::PerformanceModel>(*std::move(model));
  if (named) {
    absl::MutexLock lock(&mu_);
    cache_.emplace(key, shared);
  }
  return shared;
}

absl::StatusOr<std::pair<pb::WorkloadProfile, pb::InstanceCatalog>> ModelResolver::Load(
    const pb::WorkloadRef& workload, const pb::CatalogRef& catalog) const {
  if (workload.ref_case() == pb::WorkloadRef::REF_NOT_SET) {
    return absl::InvalidArgumentError("workload: set name or profile");
  }
  if (catalog.ref_case() == pb::CatalogRef::REF_NOT_SET) {
    return absl::InvalidArgumentError("catalog: set name or catalog");
  }
  pb::WorkloadProfile profile;
  if (workload.has_name()) {
    if (LooksLikePath(workload.name())) {
      return absl::InvalidArgumentError(
          absl::StrCat("workload.name = \"", workload.name(),
                       "\": the server reads no files; send the profile"));
    }
    auto resolved = registry_->ResolveWorkload(workload.name());
    if (!resolved.ok()) return resolved.status();
    profile = *std::move(resolved);
  } else {
    profile = workload.profile();
  }
  pb::InstanceCatalog instance_catalog;
  if (catalog.has_name()) {
    if (LooksLikePath(catalog.name())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "catalog.name = \"", catalog.name(), "\": the server reads no files; send the catalog"));
    }
    auto resolved = registry_->ResolveCatalog(catalog.name());
    if (!resolved.ok()) return resolved.status();
    instance_catalog = *std::move(resolved);
  } else {
    instance_catalog = catalog.catalog();
  }
  return std::make_pair(std::move(profile), std::move(instance_catalog));
}

}  // namespace spotdnn::services
