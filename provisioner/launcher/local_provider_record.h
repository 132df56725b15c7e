// One local instance's file in the state dir (key=value lines): LocalProvider's private record,
// shared by the provider's source files.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_LOCAL_PROVIDER_RECORD_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_LOCAL_PROVIDER_RECORD_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "provisioner/launcher/local_provider.h"

namespace spotdnn::launcher {

// One instance's file: key=value lines.
struct LocalProvider::Record {
  std::string id;
  std::string job_id;
  std::string instance_type;
  Role role = Role::kWorker;
  int index = 0;
  pid_t pgid = 0;  // also the pid of the group's leader (/bin/sh -c COMMAND)
  std::string metadata_endpoint;
  std::string metadata_control;
  std::string client_token;
  std::string service_address;  // a parameter server's host:port
  int64_t launch_unix_ms = 0;
  int64_t end_unix_ms = 0;     // when a revocation stopped it (0: not revoked, or not yet)
  int64_t revoke_unix_ms = 0;  // when a revocation's notice runs out (0: not revoked)
  Market market = Market::kSpot;
  bool terminated = false;
  std::string zone;  // a capacity zone (see Options::capacity_trace); empty: none

  std::string Serialize() const {
    return absl::StrCat("id=", id, "\njob_id=", job_id, "\ninstance_type=", instance_type,
                        "\nrole=", RoleName(role), "\nindex=", index, "\npgid=", pgid,
                        "\nmetadata_endpoint=", metadata_endpoint,
                        "\nmetadata_control=", metadata_control, "\nclient_token=", client_token,
                        "\nservice_address=", service_address, "\nlaunch_unix_ms=", launch_unix_ms,
                        "\nend_unix_ms=", end_unix_ms, "\nrevoke_unix_ms=", revoke_unix_ms,
                        "\nmarket=", MarketName(market), "\nzone=", zone,
                        "\nstate=", terminated ? "terminated" : "running", "\n");
  }

  static absl::StatusOr<Record> Parse(const std::string& text, const std::string& path) {
    std::map<std::string, std::string> kv;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      size_t eq = line.find('=');
      if (eq == absl::string_view::npos) continue;
      kv[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
    Record r;
    r.id = kv["id"];
    r.job_id = kv["job_id"];
    r.instance_type = kv["instance_type"];
    absl::StatusOr<Role> role = ParseRole(kv["role"]);
    int pgid = 0;
    if (r.id.empty() || !role.ok() || !absl::SimpleAtoi(kv["pgid"], &pgid) || pgid <= 1 ||
        !absl::SimpleAtoi(kv["index"], &r.index)) {
      return absl::DataLossError(absl::StrCat(path, ": not a spotdnn local instance file"));
    }
    r.role = *role;
    r.pgid = pgid;
    r.metadata_endpoint = kv["metadata_endpoint"];
    r.metadata_control = kv["metadata_control"];
    r.client_token = kv["client_token"];
    r.service_address = kv["service_address"];
    (void)absl::SimpleAtoi(kv["launch_unix_ms"], &r.launch_unix_ms);
    (void)absl::SimpleAtoi(kv["end_unix_ms"], &r.end_unix_ms);
    (void)absl::SimpleAtoi(kv["revoke_unix_ms"], &r.revoke_unix_ms);
    r.market = kv["market"] == "on-demand" ? Market::kOnDemand : Market::kSpot;
    r.terminated = kv["state"] == "terminated";
    r.zone = kv["zone"];
    return r;
  }

  Instance ToInstance(bool alive) const {
    Instance i;
    i.id = id;
    i.instance_type = instance_type;
    i.state = !terminated && alive ? InstanceState::kRunning : InstanceState::kTerminated;
    i.job_id = job_id;
    i.role = role;
    i.index = index;
    i.private_address = "127.0.0.1";
    i.metadata_endpoint = metadata_endpoint;
    i.service_address = service_address;
    i.launch_time = absl::FromUnixMillis(launch_unix_ms);
    i.market = market;
    if (end_unix_ms > 0) i.end_time = absl::FromUnixMillis(end_unix_ms);
    i.zone = zone;
    return i;
  }
};

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_LOCAL_PROVIDER_RECORD_H_
