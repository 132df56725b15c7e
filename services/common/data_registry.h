// Named instance catalogs and workload profiles: the built-in ones, files the operator adds, and
// files a user names on the command line. JSON in the spotdnn.v1 message shapes.
#ifndef SPOTDNN_SERVICES_COMMON_DATA_REGISTRY_H_
#define SPOTDNN_SERVICES_COMMON_DATA_REGISTRY_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "spotdnn/v1/common.pb.h"

namespace spotdnn::services {

namespace pb = ::spotdnn::v1;

// Parses JSON into `message`; unknown fields are errors. INVALID_ARGUMENT names `source`.
absl::Status ParseJson(absl::string_view json, absl::string_view source,
                       google::protobuf::Message* message);
// Prints `message` as JSON with snake_case field names and every field, zeros included.
std::string ToJson(const google::protobuf::Message& message, bool pretty = false);
// True when `arg` names a file rather than a registered name (has a '/' or ends in ".json").
bool LooksLikePath(absl::string_view arg);

class DataRegistry {
 public:
  // A registry holding the built-in catalogs and workloads (deploy/ compiled in).
  static DataRegistry WithBuiltins();

  // Adds (or replaces) entries by their `name` field; INVALID_ARGUMENT for an empty name.
  absl::Status AddCatalog(pb::InstanceCatalog catalog);
  absl::Status AddWorkload(pb::WorkloadProfile workload);
  // Adds every *.json file in `dir` as a catalog (or workload).
  absl::Status AddCatalogDir(const std::string& dir);
  absl::Status AddWorkloadDir(const std::string& dir);

  // The built-ins plus every JSON file in `catalog_dir` and `workload_dir` (each may be empty);
  // the error names the flag-like label of the folder that failed.
  static absl::StatusOr<DataRegistry> WithBuiltinsAndDirs(const std::string& catalog_dir,
                                                          const std::string& workload_dir);

  // A registered name, or a path to a JSON file (see LooksLikePath). NOT_FOUND lists known names.
  absl::StatusOr<pb::InstanceCatalog> ResolveCatalog(absl::string_view name_or_path) const;
  absl::StatusOr<pb::WorkloadProfile> ResolveWorkload(absl::string_view name_or_path) const;

  const std::map<std::string, pb::InstanceCatalog>& catalogs() const { return catalogs_; }
  const std::map<std::string, pb::WorkloadProfile>& workloads() const { return workloads_; }

 private:
  std::map<std::string, pb::InstanceCatalog> catalogs_;
  std::map<std::string, pb::WorkloadProfile> workloads_;
};

// Reads a whole file; NOT_FOUND (or PERMISSION_DENIED) names the path and the OS's reason.
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_DATA_REGISTRY_H_
