#include "services/gateway/cli/stored_profiles.h"

#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "profiler/profile_store.h"
#include "services/clients/service_clients.h"
#include "services/common/server.h"
#include "services/gateway/cli/command.h"

namespace spotdnn::gateway {

std::string ProfileDbOf(const Args& args) {
  if (auto db = args.Get("--db")) return *db;
  return (std::filesystem::path(DataDirOf(args)) / "profiles.db").string();
}

absl::StatusOr<ProfilerConnection> ConnectProfiler(const Args& args, absl::string_view server_flag,
                                                   bool create) {
  ProfilerConnection c;
  if (auto target = args.Get(server_flag)) {
    if (target->find(':') == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(server_flag, " = \"", *target, "\": expected HOST:PORT"));
    }
    c.stub = pb::Profiler::NewStub(services::MakeChannel(*target));
    c.where = absl::StrCat("the spotdnn-profiler at ", *target);
    return c;
  }
  const std::string db = ProfileDbOf(args);
  c.where = db;
  std::error_code ec;
  if (!create && !std::filesystem::exists(db, ec)) return c;
  auto store = profiler::ProfileStore::Open(db);
  if (!store.ok()) return store.status();
  // In-process, the caller is this process: it imports whatever its user can read.
  services::ProfilerOptions options;
  options.import_any_path = true;
  options.max_import_bytes = std::numeric_limits<std::uint64_t>::max();
  options.max_call_time = absl::InfiniteDuration();
  options.max_fit_time = absl::InfiniteDuration();
  c.service = std::make_unique<services::ProfilerServiceImpl>(
      std::shared_ptr<profiler::ProfileStore>(*std::move(store)), std::move(options));
  auto started = services::StartServer("", {c.service.get()});
  if (!started.ok()) return started.status();
  c.server = std::move(started->server);
  c.stub = pb::Profiler::NewStub(c.server->InProcessChannel(services::DefaultChannelArguments()));
  return c;
}

absl::StatusOr<pb::WorkloadRef> ResolveWorkloadArg(const Args& args, const std::string& arg,
                                                   const services::DataRegistry& local,
                                                   std::string* described) {
  pb::WorkloadRef ref;
  if (described != nullptr) *described = arg;
  if (services::LooksLikePath(arg)) {
    auto profile = local.ResolveWorkload(arg);
    if (!profile.ok()) return profile.status();
    *ref.mutable_profile() = *std::move(profile);
    return ref;
  }
  auto connection = ConnectProfiler(args, "--profiler", /*create=*/false);
  if (!connection.ok()) return connection.status();
  if (connection->stub != nullptr) {
    const clients::ProfilerClient profiler(*connection->stub);
    auto stored = profiler.GetProfile(arg);
    if (stored.ok()) {
      if (described != nullptr) {
        *described = absl::StrCat(arg, " (stored profile, version ", stored->version(), ")");
      }
      *ref.mutable_profile() = *std::move(stored);
      return ref;
    }
    if (!absl::IsNotFound(stored.status())) {
      return absl::Status(stored.status().code(),
                          absl::StrCat("--workload = \"", arg, "\": reading the stored profiles (",
                                       connection->where, "): ", stored.status().message()));
    }
  }
  if (!args.Has("--server") && !local.ResolveWorkload(arg).ok()) {
    // Neither stored nor built in: say where both were looked for. (A --server may know more
    // workloads than the built-in ones: it answers for itself.)
    return absl::NotFoundError(absl::StrCat(
        "--workload = \"", arg, "\": no stored profile of that name in ", connection->where,
        " (spotdnn profile list", args.Has("--profiler") ? " --server HOST:PORT" : "",
        "), no built-in workload (spotdnn workloads), and not a JSON file"));
  }
  ref.set_name(arg);
  return ref;
}

}  // namespace spotdnn::gateway
