// The local provider: Create, Launch, Describe and Terminate, and the instances' files in the
// state dir.
#include "provisioner/launcher/local_provider.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/files.h"
#include "provisioner/launcher/aws_provider.h"
#include "provisioner/launcher/local_provider_record.h"
#include "provisioner/launcher/sigv4.h"
#include "provisioner/launcher/vm_script.h"

namespace spotdnn::launcher {

namespace fs = std::filesystem;

namespace {

std::string RandomId() {
  std::random_device device;
  std::mt19937_64 rng(device());
  return absl::StrCat("i-local-", Sha256Hex(absl::StrCat(rng(), getpid())).substr(0, 12));
}

}  // namespace

std::string DefaultLocalStateDir() {
  if (const char* home = std::getenv("SPOTDNN_HOME"); home != nullptr && *home != '\0') {
    return absl::StrCat(home, "/local");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return absl::StrCat(home, "/.spotdnn/local");
  }
  return ".spotdnn/local";
}

absl::StatusOr<std::unique_ptr<LocalProvider>> LocalProvider::Create(Options options) {
  if (options.state_dir.empty()) return absl::InvalidArgumentError("state_dir is empty");
  std::error_code ec;
  fs::create_directories(options.state_dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("state_dir = \"", options.state_dir, "\": ", ec.message()));
  }
  if (!options.capacity_trace.empty()) {
    if (!(options.capacity_trace_time_scale > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("capacity_trace_time_scale = ", options.capacity_trace_time_scale,
                       ": expected trace seconds per second > 0"));
    }
    if (options.capacity_trace_origin == absl::InfinitePast()) {
      // Kept in the state dir, per job: every process that runs the job's instances reads the
      // same trace time. A new job starts the trace afresh (the time an earlier job kept there
      // would be its end, or past it: nothing would be replayed).
      const std::string path =
          CapacityTraceOriginPath(options.state_dir, options.capacity_trace_job);
      int64_t origin_ms = 0;
      std::ifstream in(path);
      std::string text;
      if (!options.capacity_trace_resume ||
          !(in && std::getline(in, text) && absl::SimpleAtoi(text, &origin_ms))) {
        origin_ms = absl::ToUnixMillis(absl::Now());
        std::ofstream out(path, std::ios::trunc);
        out << origin_ms << "\n";
        if (!out) {
          return absl::InternalError(absl::StrCat("capacity trace: cannot write ", path));
        }
      }
      options.capacity_trace_origin = absl::FromUnixMillis(origin_ms);
    }
    if (options.trace_notice == absl::ZeroDuration()) {
      options.trace_notice =
          std::max(absl::Seconds(3), absl::Minutes(2) / options.capacity_trace_time_scale);
    }
  }
  std::unique_ptr<LocalProvider> provider(new LocalProvider(std::move(options)));
  if (provider->options_.owner && !provider->options_.detached) {
    if (absl::Status s = provider->StartReaper(); !s.ok()) return s;
  }
  return provider;
}

LocalProvider::LocalProvider(Options options) : options_(std::move(options)) {}

LocalProvider::~LocalProvider() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
  }
  revocations_done_.notify_all();
  for (std::thread& t : revokers_) t.join();
  if (options_.owner && !options_.detached) {
    std::vector<std::string> mine;
    for (const Record& r : LoadAll()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (launched_.count(r.pgid) > 0) mine.push_back(r.id);
    }
    (void)Terminate(mine);
  }
  if (reaper_fd_ >= 0) close(reaper_fd_);  // EOF: the reaper kills what is left, then exits
  if (reaper_pid_ > 0) waitpid(reaper_pid_, nullptr, 0);
}

std::string LocalProvider::PathFor(const std::string& instance_id, const char* suffix) const {
  return absl::StrCat(options_.state_dir, "/", instance_id, suffix);
}

absl::StatusOr<LocalProvider::Record> LocalProvider::Load(const std::string& instance_id) const {
  for (char c : instance_id) {
    if (c == '/' || c == '\0') {
      return absl::InvalidArgumentError(absl::StrCat("instance id = \"", instance_id, "\""));
    }
  }
  std::string path = PathFor(instance_id, ".instance");
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("instance ", instance_id, " is not known in ", options_.state_dir));
  }
  std::stringstream text;
  text << in.rdbuf();
  return Record::Parse(text.str(), path);
}

std::vector<LocalProvider::Record> LocalProvider::LoadAll() const {
  std::vector<Record> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.state_dir, ec)) {
    if (entry.path().extension() != ".instance") continue;
    absl::StatusOr<Record> r = Load(entry.path().stem().string());
    if (r.ok()) out.push_back(std::move(*r));
  }
  std::sort(out.begin(), out.end(), [](const Record& a, const Record& b) {
    return std::tie(a.job_id, a.role, a.index, a.id) < std::tie(b.job_id, b.role, b.index, b.id);
  });
  return out;
}

absl::Status LocalProvider::Save(const Record& record) const {
  std::string path = PathFor(record.id, ".instance");
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << record.Serialize();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot write ", path, ": ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<LaunchResult> LocalProvider::Launch(const LaunchRequest& request) {
  if (absl::Status s = ValidateLaunchRequest(request); !s.ok()) return s;
  if (!options_.owner) {
    return absl::FailedPreconditionError("this local provider only watches; it cannot launch");
  }
  if (request.command.empty()) return absl::InvalidArgumentError("command is empty");
  std::string token =
      request.client_token.empty() ? DefaultClientToken(request) : request.client_token;
  LaunchResult result;
  result.requested = request.count;
  // The zones to try, in order: the request's (each one the type's capacity traces know, when
  // they have zones), else the traces' own; never a blocked one.
  const std::vector<std::string> known = ZonesOf(request.instance_type);
  for (const std::string& zone : request.zones) {
    if (!known.empty() && std::find(known.begin(), known.end(), zone) == known.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("zones: \"", zone, "\" is not a zone of ", request.instance_type,
                       " on the local provider (its zones: ", absl::StrJoin(known, ", "),
                       "; a zone is a capacity_trace key TYPE@ZONE)"));
    }
  }
  std::vector<std::string> order;
  for (const std::string& zone : request.zones.empty() ? known : request.zones) {
    if (std::find(request.avoid_zones.begin(), request.avoid_zones.end(), zone) ==
        request.avoid_zones.end()) {
      order.push_back(zone);
    }
  }
  if (order.empty() && (!request.zones.empty() || !known.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "avoid_zones: every zone of ", request.instance_type, " is blocked (",
        absl::StrJoin(request.avoid_zones, ", "), "); unblock one or launch elsewhere"));
  }
  if (order.empty()) order.push_back("");

  if (absl::Status s = ApplyCapacityTrace(); !s.ok()) return s;
  std::vector<Record> all = LoadAll();
  for (const Record& r : all) {
    if (r.client_token == token && r.job_id == request.job_id) {
      result.instances.push_back(r.ToInstance(Alive(r)));
    }
  }
  if (!result.instances.empty()) return result;  // launched before with this token

  // Spot instances of the type not being revoked, in `zone` (all of them without zones).
  auto running_in = [&](const std::string& zone) {
    int running = 0;
    for (const Record& r : all) {
      if (r.instance_type == request.instance_type && r.market == Market::kSpot &&
          r.revoke_unix_ms == 0 && !r.terminated && (known.empty() || r.zone == zone) && Alive(r)) {
        ++running;
      }
    }
    return running;
  };
  // On-demand instances are not limited by spot capacity (and do not use it up): the first zone.
  std::string zone = order.front();
  int fits = request.count;
  if (request.market == Market::kSpot) {
    int best = -1;
    std::string best_zone;
    std::vector<std::string> why;
    bool found = false;
    for (const std::string& z : order) {
      const int capacity = SpotCapacityNow(request.instance_type, z);
      if (capacity < 0) {
        zone = z;
        found = true;
        break;
      }
      const int running = running_in(z);
      const int free = std::clamp(capacity - running, 0, request.count);
      if (free >= request.count) {
        zone = z;
        found = true;
        break;
      }
      const std::string where = z.empty() ? "" : absl::StrCat(" in ", z);
      why.push_back(absl::StrCat(request.instance_type, " has spot capacity", where, " for ",
                                 capacity, " instance(s), ", running, " running"));
      if (!z.empty()) {
        result.refused_zones.push_back(absl::StrCat(z, ": InsufficientInstanceCapacity (room for ",
                                                    free, " of ", request.count, ")"));
      }
      if (free > best) {
        best = free;
        best_zone = z;
      }
    }
    if (!found) {
      zone = best_zone;
      fits = std::max(best, 0);
      result.error = absl::ResourceExhaustedError(absl::StrCat(
          "local: InsufficientInstanceCapacity: ", absl::StrJoin(why, "; "), "; launched ", fits,
          " of ", request.count, zone.empty() ? "" : absl::StrCat(" in ", zone),
          "; re-plan without instance type ", request.instance_type, " or launch it on-demand"));
      if (fits == 0) return result.error;
    }
  }
  // Parameter servers share 127.0.0.1: each needs a port of its own, known to all before any
  // starts (every server gets the whole list).
  LaunchRequest effective = request;
  if (request.role == Role::kParameterServer && request.ps_addresses.empty()) {
    for (int i = 0; i < fits; ++i) {
      absl::StatusOr<int> port = FreeLoopbackPort();
      if (!port.ok()) return port.status();
      effective.ps_addresses.push_back(absl::StrCat("127.0.0.1:", *port));
    }
  }
  for (int i = 0; i < fits; ++i) {
    Record record;
    record.id = RandomId();
    record.job_id = request.job_id;
    record.instance_type = request.instance_type;
    record.role = request.role;
    record.index = request.first_index + i;
    record.client_token = token;
    record.market = request.market;
    record.zone = zone;
    record.launch_unix_ms = absl::ToUnixMillis(absl::Now());
    if (options_.metadata != nullptr) {
      record.metadata_endpoint = options_.metadata->EndpointFor(record.id);
      record.metadata_control = options_.metadata->ControlUrl();
    }
    std::map<std::string, std::string> env =
        InstanceEnvironment(effective, record.index, record.id, record.metadata_endpoint);
    if (request.role == Role::kParameterServer &&
        i < static_cast<int>(effective.ps_addresses.size())) {
      record.service_address = effective.ps_addresses[i];
      const size_t colon = record.service_address.rfind(':');
      env["SPOTDNN_PS_PORT"] = record.service_address.substr(colon + 1);
    }
    absl::StatusOr<pid_t> pid = Spawn(request.command, env, PathFor(record.id, ".log"));
    if (!pid.ok()) {
      result.error =
          absl::InternalError(absl::StrCat("cannot start ", options_.shell, " for instance ", i,
                                           " of ", request.count, ": ", pid.status().message()));
      break;
    }
    TellReaper(*pid, true);
    record.pgid = *pid;
    if (absl::Status s = Save(record); !s.ok()) {
      kill(-*pid, SIGKILL);
      result.error = s;
      break;
    }
    result.instances.push_back(record.ToInstance(true));
  }
  if (result.instances.empty() && !result.error.ok()) return result.error;
  return result;
}

std::string LocalProvider::OutputLocation() const {
  return (fs::path(options_.state_dir) / "logs").string();
}

absl::StatusOr<int> FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket(): ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return absl::InternalError(absl::StrCat("cannot find a free local port: ", why));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

absl::StatusOr<std::vector<Instance>> LocalProvider::Describe(const std::string& job_id) {
  if (absl::Status s = ApplyCapacityTrace(); !s.ok()) return s;
  ReapOwned();
  std::vector<Instance> out;
  for (const Record& r : LoadAll()) {
    if (!job_id.empty() && r.job_id != job_id) continue;
    out.push_back(r.ToInstance(!r.terminated && Alive(r)));
    // Gone by itself (not terminated, not revoked): did its command end, or was it killed with
    // its agent?
    if (out.back().state == InstanceState::kTerminated && !r.terminated && r.revoke_unix_ms == 0) {
      out.back().command_end =
          CommandEndFromLog(base::FileTail(PathFor(r.id, ".log"), 64 << 10), 20);
    }
  }
  return out;
}

absl::Status LocalProvider::Terminate(const std::vector<std::string>& instance_ids) {
  std::vector<Record> records;
  std::vector<std::string> unknown;
  for (const std::string& id : instance_ids) {
    absl::StatusOr<Record> r = Load(id);
    if (r.ok()) {
      records.push_back(std::move(*r));
    } else {
      unknown.push_back(id);
    }
  }
  for (const Record& r : records) {
    Stop(r);
    std::error_code ec;
    fs::remove(PathFor(r.id, ".instance"), ec);
    // The output stays, for whoever asks why an instance failed: STATE_DIR/logs/ID.log.
    fs::create_directories(fs::path(options_.state_dir) / "logs", ec);
    fs::rename(PathFor(r.id, ".log"), fs::path(options_.state_dir) / "logs" / (r.id + ".log"), ec);
    if (ec) fs::remove(PathFor(r.id, ".log"), ec);
  }
  if (!unknown.empty()) {
    return absl::NotFoundError(
        absl::StrCat("unknown local instance(s): ", absl::StrJoin(unknown, ", "), " (state dir ",
                     options_.state_dir, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SpotPrice>> LocalProvider::SpotPrices(const std::vector<std::string>&,
                                                                 const std::string&) {
  return absl::UnimplementedError("the local provider has no spot market; use --provider aws");
}

absl::StatusOr<pid_t> LocalProvider::ProcessGroup(const std::string& instance_id) {
  absl::StatusOr<Record> record = Load(instance_id);
  if (!record.ok()) return record.status();
  if (record->terminated || !Alive(*record)) {
    return absl::NotFoundError(absl::StrCat("instance ", instance_id, " is not running"));
  }
  return record->pgid;
}

}  // namespace spotdnn::launcher
