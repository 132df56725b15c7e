#include "services/common/data_registry.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "services/common/embedded_file.h"
#include "services/common/json_names.h"
#include "services/common/request_check.h"

namespace spotdnn::services {
namespace {

template <typename Map>
std::string KnownNames(const Map& map) {
  std::vector<std::string> names;
  for (const auto& [name, unused] : map) names.push_back(name);
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

template <typename Message>
absl::StatusOr<Message> LoadFile(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  Message message;
  if (auto s = ParseJson(*text, path, &message); !s.ok()) return s;
  return message;
}

template <typename Message, typename Map>
absl::StatusOr<Message> Resolve(const Map& map, absl::string_view kind,
                                absl::string_view name_or_path) {
  if (LooksLikePath(name_or_path)) {
    auto message = LoadFile<Message>(std::string(name_or_path));
    if (message.ok() && message->name().empty()) {
      message->set_name(std::filesystem::path(std::string(name_or_path)).stem().string());
    }
    return message;
  }
  auto it = map.find(std::string(name_or_path));
  if (it == map.end()) {
    return absl::NotFoundError(absl::StrCat(kind, " \"", name_or_path, "\" not found; known ", kind,
                                            "s: ", KnownNames(map),
                                            " (or give a path to a JSON file)"));
  }
  return it->second;
}

template <typename Message>
absl::Status AddDir(const std::string& dir, absl::string_view kind,
                    absl::Status (DataRegistry::*add)(Message), DataRegistry* registry) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) {
    return absl::NotFoundError(
        absl::StrCat("cannot list ", kind, " folder ", dir, ": ", ec.message()));
  }
  std::vector<std::filesystem::path> files;
  for (const auto& entry : it) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    auto message = LoadFile<Message>(file.string());
    if (!message.ok()) return message.status();
    if (message->name().empty()) message->set_name(file.stem().string());
    if (auto s = (registry->*add)(*std::move(message)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseJson(absl::string_view json, absl::string_view source,
                       google::protobuf::Message* message) {
  // "sync": "allreduce" and the like: the short names a person writes, for protobuf's parser.
  auto expanded = WithProtoEnumNames(json, *message->GetDescriptor());
  if (!expanded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", expanded.status().message()));
  }
  if (expanded->has_value()) json = **expanded;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), message, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a valid ",
                                                   message->GetDescriptor()->name(),
                                                   " JSON: ", std::string(status.message())));
  }
  return absl::OkStatus();
}

std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  options.add_whitespace = pretty;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return WithShortEnumNames(out, *message.GetDescriptor(), pretty);
}

bool LooksLikePath(absl::string_view arg) {
  return absl::StrContains(arg, '/') || absl::EndsWith(arg, ".json");
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    std::string reason = std::strerror(err);
    if (err == EACCES) return absl::PermissionDeniedError(absl::StrCat(path, ": ", reason));
    return absl::NotFoundError(absl::StrCat(path, ": ", reason));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

DataRegistry DataRegistry::WithBuiltins() {
  DataRegistry registry;
  for (const EmbeddedFile& f : BuiltinCatalogFiles()) {
    pb::InstanceCatalog catalog;
    // Built-in files are parsed in tests; a failure here is a build defect.
    if (ParseJson(f.content, f.name, &catalog).ok()) registry.catalogs_[catalog.name()] = catalog;
  }
  for (const EmbeddedFile& f : BuiltinWorkloadFiles()) {
    pb::WorkloadProfile workload;
    if (ParseJson(f.content, f.name, &workload).ok()) {
      registry.workloads_[workload.name()] = workload;
    }
  }
  return registry;
}

absl::StatusOr<DataRegistry> DataRegistry::WithBuiltinsAndDirs(const std::string& catalog_dir,
                                                               const std::string& workload_dir) {
  DataRegistry registry = WithBuiltins();
  if (!catalog_dir.empty()) {
    if (auto s = registry.AddCatalogDir(catalog_dir); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--catalog_dir: ", s.message()));
    }
  }
  if (!workload_dir.empty()) {
    if (auto s = registry.AddWorkloadDir(workload_dir); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--workload_dir: ", s.message()));
    }
  }
  return registry;
}

absl::Status DataRegistry::AddCatalog(pb::InstanceCatalog catalog) {
  if (catalog.name().empty()) return absl::InvalidArgumentError("catalog.name is empty");
  std::string name = catalog.name();
  if (auto s = CheckCatalogZones(catalog, absl::StrCat("catalog \"", name, "\"")); !s.ok()) {
    return s;
  }
  catalogs_[name] = std::move(catalog);
  return absl::OkStatus();
}

absl::Status DataRegistry::AddWorkload(pb::WorkloadProfile workload) {
  if (workload.name().empty()) return absl::InvalidArgumentError("workload.name is empty");
  std::string name = workload.name();
  workloads_[name] = std::move(workload);
  return absl::OkStatus();
}

absl::Status DataRegistry::AddCatalogDir(const std::string& dir) {
  return AddDir<pb::InstanceCatalog>(dir, "catalog", &DataRegistry::AddCatalog, this);
}

absl::Status DataRegistry::AddWorkloadDir(const std::string& dir) {
  return AddDir<pb::WorkloadProfile>(dir, "workload", &DataRegistry::AddWorkload, this);
}

absl::StatusOr<pb::InstanceCatalog> DataRegistry::ResolveCatalog(
    absl::string_view name_or_path) const {
  return Resolve<pb::InstanceCatalog>(catalogs_, "catalog", name_or_path);
}

absl::StatusOr<pb::WorkloadProfile> DataRegistry::ResolveWorkload(
    absl::string_view name_or_path) const {
  return Resolve<pb::WorkloadProfile>(workloads_, "workload", name_or_path);
}

}  // namespace spotdnn::services
