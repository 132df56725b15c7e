// `spotdnn detector register|unregister|list`: the instances a spotdnn-detector watches, by hand
// (what `spotdnn run` does for its own instances): register an instance whose metadata endpoint
// the detector polls itself, or one an agent reports for; stop watching one; list them.
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "services/clients/service_clients.h"
#include "services/common/convert.h"
#include "services/common/server.h"
#include "services/gateway/cli/cli.h"
#include "services/gateway/cli/command.h"
#include "services/gateway/cli/output.h"
#include "services/gateway/cli/watch_command.h"

namespace spotdnn::gateway {
namespace {

std::string Utc(int64_t unix_ms) {
  return unix_ms > 0 ? absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(unix_ms),
                                        absl::UTCTimeZone())
                     : "-";
}

// The detector's client for a command: --server, else the stack's, else the default address.
struct DetectorConnection {
  std::unique_ptr<pb::Detector::Stub> stub;
  std::string address;
};

absl::StatusOr<DetectorConnection> ConnectDetector(const Args& args) {
  DetectorConnection c{.address = DetectorAddressOf(args)};
  if (c.address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--server = \"", c.address, "\": expected HOST:PORT"));
  }
  c.stub = pb::Detector::NewStub(services::MakeChannel(c.address));
  return c;
}

// A failed call, with the detector's address when it could not be reached.
absl::Status At(const absl::Status& s, const std::string& address) {
  if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) {
    return absl::Status(s.code(), absl::StrCat("the detector at ", address, ": ", s.message()));
  }
  return s;
}

std::string InstanceJson(const pb::WatchedInstance& i) {
  JsonObject o;
  o.String("instance_id", i.instance_id()).String("job_id", i.job_id());
  if (i.cloud() == pb::CLOUD_UNSPECIFIED) {
    o.Raw("cloud", "null");
  } else {
    o.String("cloud", services::EnumLabel(i.cloud()));
  }
  o.String("instance_type", i.instance_type())
      .String("metadata_endpoint", i.metadata_endpoint())
      .String("state", services::EnumLabel(i.state()))
      .String("reason", i.reason())
      .String("replica", i.replica())
      .Number("registered_unix_ms",
              i.registered_unix_ms() > 0 ? static_cast<double>(i.registered_unix_ms()) : NAN)
      .Number("last_heartbeat_unix_ms", i.last_heartbeat_unix_ms() > 0
                                            ? static_cast<double>(i.last_heartbeat_unix_ms())
                                            : NAN);
  return o.str();
}

int Register(const Args& args, const Io& io) {
  auto fail = [&](const absl::Status& s) { return ReportError(s, "detector register", io); };
  pb::WatchedInstance instance;
  instance.set_instance_id(args.positional()[0]);
  instance.set_job_id(args.Get("--job").value_or(""));
  instance.set_instance_type(args.Get("--instance-type").value_or(""));
  instance.set_metadata_endpoint(args.Get("--metadata-endpoint").value_or(""));
  if (auto cloud = args.Get("--cloud")) {
    auto parsed = services::ParseEnumLabel<pb::Cloud>("--cloud", *cloud);
    if (!parsed.ok() || *parsed == pb::CLOUD_UNSPECIFIED) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("--cloud = \"", *cloud, "\": expected aws, gce or azure")));
    }
    instance.set_cloud(*parsed);
  } else if (!instance.metadata_endpoint().empty()) {
    return fail(absl::InvalidArgumentError(
        "missing required flag --cloud (aws, gce or azure): the detector reads the metadata "
        "endpoint as that cloud's"));
  }
  auto connection = ConnectDetector(args);
  if (!connection.ok()) return fail(connection.status());
  const clients::DetectorClient detector(*connection->stub);
  if (auto s = detector.Register(instance); !s.ok()) {
    // The service names its fields ("instance.cloud"); say the flags.
    std::string message(s.message());
    for (const auto& [field, flag] :
         {std::pair<std::string, std::string>{"instance.instance_id", "INSTANCE"},
          {"instance.metadata_endpoint", "--metadata-endpoint"},
          {"instance.cloud", "--cloud"},
          {"instance.job_id", "--job"},
          {"instance.instance_type", "--instance-type"}}) {
      if (absl::StartsWith(message, field)) message = flag + message.substr(field.size());
    }
    return fail(At(absl::Status(s.code(), message), connection->address));
  }
  if (io.json) {
    io.out << JsonObject()
                  .Bool("registered", true)
                  .String("detector", connection->address)
                  .Raw("instance", InstanceJson(instance))
                  .str()
           << "\n";
  } else {
    io.out << "Registered " << instance.instance_id() << " with the detector at "
           << connection->address
           << (instance.metadata_endpoint().empty()
                   ? std::string(": its agent reports its notices and heartbeats")
                   : absl::StrCat(": it polls ", instance.metadata_endpoint(), " as ",
                                  services::EnumLabel(instance.cloud())))
           << ".\n";
  }
  return kExitOk;
}

int Unregister(const Args& args, const Io& io) {
  auto fail = [&](const absl::Status& s) { return ReportError(s, "detector unregister", io); };
  auto connection = ConnectDetector(args);
  if (!connection.ok()) return fail(connection.status());
  const clients::DetectorClient detector(*connection->stub);
  std::vector<std::string> done;
  for (const std::string& id : args.positional()) {
    if (auto s = detector.Unregister(id); !s.ok()) {
      return fail(
          At(absl::Status(s.code(),
                          absl::StrCat("INSTANCE = \"", id, "\": ", s.message(),
                                       done.empty() ? ""
                                                    : absl::StrCat(" (unregistered before it: ",
                                                                   absl::StrJoin(done, " "), ")"))),
             connection->address));
    }
    done.push_back(id);
  }
  if (io.json) {
    std::vector<std::string> quoted;
    for (const std::string& id : done) quoted.push_back(JsonString(id));
    io.out << JsonObject().Raw("unregistered", "[" + absl::StrJoin(quoted, ",") + "]").str()
           << "\n";
  } else {
    io.out << "Unregistered " << absl::StrJoin(done, " ") << " from the detector at "
           << connection->address << ".\n";
  }
  return kExitOk;
}

int List(const Args& args, const Io& io) {
  auto fail = [&](const absl::Status& s) { return ReportError(s, "detector list", io); };
  auto connection = ConnectDetector(args);
  if (!connection.ok()) return fail(connection.status());
  const clients::DetectorClient detector(*connection->stub);
  pb::ListInstancesRequest request;
  request.set_job_id(args.Get("--job").value_or(""));
  auto listed = detector.ListInstances(request);
  if (!listed.ok()) return fail(At(listed.status(), connection->address));
  if (io.json) {
    std::vector<std::string> items;
    for (const pb::WatchedInstance& i : listed->instances()) items.push_back(InstanceJson(i));
    io.out << JsonObject()
                  .String("detector", connection->address)
                  .Raw("instances", "[" + absl::StrJoin(items, ",") + "]")
                  .str()
           << "\n";
    return kExitOk;
  }
  if (listed->instances_size() == 0) {
    io.out << "The detector at " << connection->address << " watches no instances"
           << (request.job_id().empty() ? "" : " of job " + request.job_id()) << ".\n";
    return kExitOk;
  }
  Table table({"instance", "job", "cloud", "type", "state", "replica", "registered",
               "metadata endpoint", "reason"});
  for (size_t c = 1; c < 9; ++c) table.LeftAlign(c);
  for (const pb::WatchedInstance& i : listed->instances()) {
    table.AddRow({i.instance_id(), i.job_id().empty() ? "-" : i.job_id(),
                  i.cloud() == pb::CLOUD_UNSPECIFIED ? "-" : services::EnumLabel(i.cloud()),
                  i.instance_type().empty() ? "-" : i.instance_type(),
                  services::EnumLabel(i.state()), i.replica().empty() ? "-" : i.replica(),
                  Utc(i.registered_unix_ms()),
                  i.metadata_endpoint().empty() ? "- (agent)" : i.metadata_endpoint(),
                  i.reason().empty() ? "-" : i.reason()});
  }
  table.Print(io.out);
  io.out << Plural(listed->instances_size(), "instance", "instances") << " on the detector at "
         << connection->address << "\n";
  return kExitOk;
}

FlagHelp DetectorServerFlag() {
  return {"--server", "HOST:PORT",
          "the spotdnn-detector (default: the stack's, when `spotdnn up` runs, else\n"
          "127.0.0.1:50054); any replica of several (it forwards to the others)"};
}

}  // namespace

std::vector<Command> DetectorCommands() {
  return {
      {.name = "detector",
       .summary = "register, unregister and list the instances a spotdnn-detector watches",
       .description =
           "The detector watches registered instances: it polls an instance's metadata endpoint "
           "itself\n(--metadata-endpoint, e.g. the local provider's or the metadata emulator's), "
           "or takes its\nnotices and heartbeats from the spotdnn-agent on it. `spotdnn run` "
           "registers its instances\nitself; these commands are for instances of your own. "
           "Events: spotdnn watch."},
      {.name = "detector register",
       .summary = "watch an instance: poll its metadata endpoint, or hear its agent",
       .synopsis = "INSTANCE [--job J] [--cloud aws|gce|azure --metadata-endpoint URL]\n"
                   "[--instance-type T] [--server HOST:PORT | --data-dir D] [--json]",
       .description =
           "Registers INSTANCE with the detector. With --metadata-endpoint the detector polls "
           "that URL as\n--cloud's metadata service (AWS instance-action and rebalance, GCE "
           "preempted, Azure Scheduled\nEvents); without it the instance's spotdnn-agent "
           "reports for it. Registering an instance\nagain is harmless (nothing already "
           "reported is reported again).",
       .flags = {{"--job", "J", "the job it belongs to (spotdnn watch --job J)"},
                 {"--cloud", "C", "aws, gce or azure: whose metadata service the endpoint is"},
                 {"--metadata-endpoint", "URL",
                  "the instance's metadata service, polled by the detector (e.g.\n"
                  "http://127.0.0.1:8080/i/i-1 on a spotdnn-metadata-emulator)"},
                 {"--instance-type", "T",
                  "its instance type (recorded with its lifetime: catalog hazards\n"
                  "--from-detector)"},
                 DetectorServerFlag(),
                 DataDirFlag()},
       .min_positional = 1,
       .max_positional = 1,
       .footer = "Exit status: 0 registered, 2 bad input, 1 the detector could not be reached.",
       .run = Register},
      {.name = "detector unregister",
       .summary = "stop watching instances",
       .synopsis = "INSTANCE... [--server HOST:PORT | --data-dir D] [--json]",
       .flags = {DetectorServerFlag(), DataDirFlag()},
       .min_positional = 1,
       .max_positional = -1,
       .footer = "Exit status: 0 unregistered, 2 an instance the detector does not know, 1 the "
                 "detector could\nnot be reached.",
       .run = Unregister},
      {.name = "detector list",
       .summary = "the instances the detector watches, with their state",
       .synopsis = "[--job J] [--server HOST:PORT | --data-dir D] [--json]",
       .flags = {{"--job", "J", "only this job's instances"}, DetectorServerFlag(), DataDirFlag()},
       .run = List},
  };
}

}  // namespace spotdnn::gateway
