#include "detector/metadata_emulator.h"

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "detector/metadata_parsers.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace spotdnn::detector {
namespace {

using Json = nlohmann::json;
constexpr int64_t kAwsNoticeMs = 120'000;
constexpr int64_t kShortNoticeMs = 30'000;

// With the milliseconds when there are any: EC2 writes whole seconds (its notices come two minutes
// ahead), but a notice of `spotdnn local revoke --notice 3s` must not lose up to a second of it.
std::string Rfc3339(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E*SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

std::string HttpDate(int64_t unix_ms) {
  return absl::FormatTime("%a, %d %b %Y %H:%M:%S GMT", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

// The first half of `body`, as a connection cut short would deliver it.
std::string Truncate(const std::string& body) { return body.substr(0, body.size() / 2); }

}  // namespace

struct MetadataEmulator::Instance {
  struct Scheduled {
    EmulatedNotice notice;
    std::string azure_event_id;
    bool acked = false;
  };
  std::vector<Scheduled> notices;
  EmulatorFault fault = EmulatorFault::kNone;
  std::string fault_path;  // empty: every path
  int slow_ms = 0;
  std::map<std::string, int64_t> tokens;  // token -> expiry (unix ms)
  EmulatorStats stats;

  // The fault injected into answers on `path`.
  EmulatorFault FaultFor(const std::string& path) const {
    return fault_path.empty() || fault_path == path ? fault : EmulatorFault::kNone;
  }
  // Notices of `cloud` and `kind` visible at `now`.
  std::vector<const Scheduled*> Visible(Cloud cloud, EventKind kind, int64_t now) const {
    std::vector<const Scheduled*> out;
    for (const Scheduled& s : notices) {
      if (s.notice.cloud == cloud && s.notice.kind == kind && s.notice.visible_at_unix_ms <= now) {
        out.push_back(&s);
      }
    }
    return out;
  }
  // The earliest time after `now` at which a notice becomes visible (INT64_MAX when none).
  int64_t NextVisible(int64_t now) const {
    int64_t next = INT64_MAX;
    for (const Scheduled& s : notices) {
      if (s.notice.visible_at_unix_ms > now) next = std::min(next, s.notice.visible_at_unix_ms);
    }
    return next;
  }
};

std::string EmulatedAzureVmName(const std::string& instance_id) {
  return instance_id.empty() ? "vm-emulated" : instance_id;
}

absl::StatusOr<EmulatorFault> ParseEmulatorFault(std::string_view text) {
  if (text == "none") return EmulatorFault::kNone;
  if (text == "500") return EmulatorFault::kServerError;
  if (text == "401") return EmulatorFault::kUnauthorized;
  if (text == "garbage") return EmulatorFault::kGarbage;
  if (text == "truncated") return EmulatorFault::kTruncated;
  if (text == "slow") return EmulatorFault::kSlow;
  return absl::InvalidArgumentError(absl::StrCat(
      "fault = \"", std::string(text), "\": expected none, 500, 401, garbage, truncated or slow"));
}

MetadataEmulator::MetadataEmulator(const Options& options)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : &base::RealClock::Get()) {}

absl::StatusOr<std::unique_ptr<MetadataEmulator>> MetadataEmulator::Start(const Options& options) {
  std::unique_ptr<MetadataEmulator> emulator(new MetadataEmulator(options));
  emulator->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *emulator->server_;
  const int threads = std::max(1, options.threads);
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.set_keep_alive_max_count(options.keep_alive ? 100000 : 1);
  server.set_keep_alive_timeout(5);
  server.set_tcp_nodelay(true);  // headers and body go out as separate writes
  // SO_REUSEADDR only (a restart may rebind at once). httplib's default adds SO_REUSEPORT, with
  // which a second emulator on a taken port would start too and share its connections.
  server.set_socket_options([](int socket) {
    int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  MetadataEmulator* self = emulator.get();
  auto handler = [self](const httplib::Request& req, httplib::Response& res) {
    self->Handle(req, res);
  };
  server.Get(".*", handler);
  server.Put(".*", handler);
  server.Post(".*", handler);
  int port = options.port == 0
                 ? server.bind_to_any_port(options.host)
                 : (server.bind_to_port(options.host, options.port) ? options.port : -1);
  if (port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("metadata emulator: cannot listen on ", options.host, ":", options.port,
                     ": the address is in use (another server listens there) or invalid"));
  }
  emulator->port_ = port;
  emulator->thread_ = std::thread([self] { self->server_->listen_after_bind(); });
  // httplib's stop() does nothing until the listen loop runs, and that loop would then never
  // end: Start returns only once it runs, so an early Stop cannot hang.
  base::Clock& real = base::RealClock::Get();  // a real thread starting
  const absl::Duration deadline = real.SteadyNow() + absl::Seconds(30);
  while (!emulator->server_->is_running() && real.SteadyNow() < deadline) {
    real.Sleep(absl::Milliseconds(1));
  }
  return emulator;
}

MetadataEmulator::~MetadataEmulator() { Stop(); }

void MetadataEmulator::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string MetadataEmulator::EndpointFor(const std::string& instance_id) const {
  return absl::StrCat("http://", options_.host, ":", port_, "/i/", instance_id);
}

MetadataEmulator::Instance& MetadataEmulator::InstanceLocked(const std::string& instance_id) {
  auto& slot = instances_[instance_id];
  if (!slot) slot = std::make_unique<Instance>();
  return *slot;
}

void MetadataEmulator::ScheduleNotice(const std::string& instance_id, EmulatedNotice notice) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = clock_->NowUnixMs();
    if (notice.visible_at_unix_ms == 0) notice.visible_at_unix_ms = now;
    if (notice.effective_unix_ms == 0) {
      notice.effective_unix_ms =
          notice.visible_at_unix_ms + (notice.cloud == Cloud::kAws ? kAwsNoticeMs : kShortNoticeMs);
    }
    if (notice.action.empty()) {
      switch (notice.cloud) {
        case Cloud::kAws:
          notice.action = "terminate";
          break;
        case Cloud::kGce:
          notice.action = "TERMINATE_ON_HOST_MAINTENANCE";
          break;
        default:
          notice.action = notice.kind == EventKind::kNotice ? "Preempt" : "Reboot";
      }
    }
    Instance::Scheduled s;
    s.notice = std::move(notice);
    s.azure_event_id = absl::StrFormat("%08X-0000-4000-8000-%012X", next_event_, next_event_);
    ++next_event_;
    InstanceLocked(instance_id).notices.push_back(std::move(s));
  }
  changed_.notify_all();
}

void MetadataEmulator::ClearNotices(const std::string& instance_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Instance& instance = InstanceLocked(instance_id);
    instance.notices.clear();
    ++clears_;
  }
  changed_.notify_all();
}

void MetadataEmulator::SetFault(const std::string& instance_id, EmulatorFault fault, int slow_ms,
                                const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  Instance& instance = InstanceLocked(instance_id);
  instance.fault = fault;
  instance.fault_path = path;
  instance.slow_ms = slow_ms;
  changed_.notify_all();  // slow answers in progress end when their fault does
}

void MetadataEmulator::ExpireTokens(const std::string& instance_id) {
  std::lock_guard<std::mutex> lock(mu_);
  InstanceLocked(instance_id).tokens.clear();
}

EmulatorStats MetadataEmulator::Stats(const std::string& instance_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = instances_.find(instance_id);
  return it == instances_.end() ? EmulatorStats() : it->second->stats;
}

void MetadataEmulator::Handle(const httplib::Request& request, httplib::Response& response) {
  response.status = 200;  // httplib leaves it unset until the handler returns
  std::string path = request.path;
  if (path.rfind("/emulator/", 0) == 0) {
    HandleControl(request, response);
    return;
  }
  std::string instance_id;
  if (path.rfind("/i/", 0) == 0) {
    const size_t slash = path.find('/', 3);
    instance_id = path.substr(3, slash == std::string::npos ? std::string::npos : slash - 3);
    path = slash == std::string::npos ? "/" : path.substr(slash);
  }
  std::unique_lock<std::mutex> lock(mu_);
  Instance& instance = InstanceLocked(instance_id);
  ++instance.stats.requests;
  const EmulatorFault fault = instance.FaultFor(path);
  if (fault == EmulatorFault::kSlow && instance.slow_ms > 0) {
    const int slow_ms = instance.slow_ms;
    changed_.wait_for(lock, std::chrono::milliseconds(slow_ms),
                      [&] { return stopping_ || instance.FaultFor(path) != EmulatorFault::kSlow; });
  }
  if (fault == EmulatorFault::kServerError) {
    response.status = 500;
    response.set_content("Internal Server Error", "text/plain");
    return;
  }
  if (path.rfind("/latest/", 0) == 0) {
    HandleAws(instance, path, request, response, lock);
  } else if (path.rfind("/computeMetadata/v1/", 0) == 0) {
    HandleGce(instance, instance_id, path, request, response, lock);
  } else if (path == "/metadata/scheduledevents" || path == "/metadata/instance/compute") {
    HandleAzure(instance, instance_id, path, request, response);
  } else {
    response.status = 404;
    response.set_content("Not Found", "text/plain");
    return;
  }
  // Garbage and truncation hit the data answers (not the AWS token, which has no structure).
  if (path == "/latest/api/token") return;
  if (response.status == 200 && fault == EmulatorFault::kGarbage) {
    response.set_content("<html><body>502 Bad Gateway {\"action\":", "text/html");
  } else if (response.status == 200 && fault == EmulatorFault::kTruncated) {
    response.set_content(Truncate(response.body), "application/json");
  }
}

void MetadataEmulator::HandleAws(Instance& instance, const std::string& path,
                                 const httplib::Request& request, httplib::Response& response,
                                 std::unique_lock<std::mutex>& /*lock*/) {
  const int64_t now = clock_->NowUnixMs();
  if (path == "/latest/api/token") {
    if (request.method != "PUT") {
      response.status = 405;
      return;
    }
    int ttl = 0;
    if (!absl::SimpleAtoi(request.get_header_value("X-aws-ec2-metadata-token-ttl-seconds"), &ttl) ||
        ttl < 1 || ttl > 21600) {
      response.status = 400;
      response.set_content("Bad Request", "text/plain");
      return;
    }
    const std::string token = absl::StrFormat("AQAEA%016xemulated", next_token_++ * 2654435761u);
    instance.tokens[token] = now + int64_t{ttl} * 1000;
    ++instance.stats.token_requests;
    response.set_header("X-aws-ec2-metadata-token-ttl-seconds", std::to_string(ttl));
    response.set_content(token, "text/plain");
    return;
  }
  if (request.method != "GET") {
    response.status = 405;
    return;
  }
  // IMDSv2 only: a missing, unknown or expired token is 401.
  const std::string token = request.get_header_value("X-aws-ec2-metadata-token");
  auto it = instance.tokens.find(token);
  if (instance.FaultFor(path) == EmulatorFault::kUnauthorized || it == instance.tokens.end() ||
      it->second <= now) {
    ++instance.stats.unauthorized;
    response.status = 401;
    response.set_content("Unauthorized", "text/plain");
    return;
  }
  if (path == "/latest/meta-data/spot/instance-action") {
    auto visible = instance.Visible(Cloud::kAws, EventKind::kNotice, now);
    if (visible.empty()) {
      response.status = 404;
      response.set_content("Not Found", "text/plain");
      return;
    }
    const EmulatedNotice& n = visible.back()->notice;
    response.set_content(Json{{"action", n.action}, {"time", Rfc3339(n.effective_unix_ms)}}.dump(),
                         "text/plain");
    return;
  }
  if (path == "/latest/meta-data/events/recommendations/rebalance") {
    auto visible = instance.Visible(Cloud::kAws, EventKind::kRebalance, now);
    if (visible.empty()) {
      response.status = 404;
      response.set_content("Not Found", "text/plain");
      return;
    }
    response.set_content(
        Json{{"noticeTime", Rfc3339(visible.front()->notice.visible_at_unix_ms)}}.dump(),
        "text/plain");
    return;
  }
  response.status = 404;
  response.set_content("Not Found", "text/plain");
}

void MetadataEmulator::HandleGce(Instance& instance, const std::string& instance_id,
                                 const std::string& path, const httplib::Request& request,
                                 httplib::Response& response, std::unique_lock<std::mutex>& lock) {
  if (request.get_header_value("Metadata-Flavor") != "Google" ||
      request.has_header("X-Forwarded-For")) {
    response.status = 403;
    response.set_content("Forbidden: missing Metadata-Flavor: Google", "text/html");
    return;
  }
  const bool preempted_path = path == "/computeMetadata/v1/instance/preempted";
  if (!preempted_path && path != "/computeMetadata/v1/instance/maintenance-event") {
    response.status = 404;
    response.set_content("Not Found", "text/html");
    return;
  }
  auto value_at = [&](int64_t now) -> std::string {
    if (preempted_path) {
      return instance.Visible(Cloud::kGce, EventKind::kNotice, now).empty() ? "FALSE" : "TRUE";
    }
    auto visible = instance.Visible(Cloud::kGce, EventKind::kMaintenance, now);
    return visible.empty() ? "NONE" : visible.back()->notice.action;
  };
  auto etag_of = [&](const std::string& value) {
    return absl::StrFormat("%016x",
                           std::hash<std::string>()(instance_id + "|" + path + "|" + value));
  };
  int64_t now = clock_->NowUnixMs();
  std::string value = value_at(now);
  if (request.get_param_value("wait_for_change") == "true") {
    const std::string last_etag = request.get_param_value("last_etag");
    int timeout_s = 60;
    if (request.has_param("timeout_sec")) {
      if (!absl::SimpleAtoi(request.get_param_value("timeout_sec"), &timeout_s) || timeout_s < 1) {
        response.status = 400;
        response.set_content("Bad Request: timeout_sec", "text/html");
        return;
      }
    }
    int64_t hold_ms = std::min(timeout_s, 3600) * int64_t{1000};
    if (options_.max_long_poll > absl::ZeroDuration()) {
      hold_ms = std::min(hold_ms, absl::ToInt64Milliseconds(options_.max_long_poll));
    }
    const int64_t deadline = now + hold_ms;
    while (!stopping_ && etag_of(value) == last_etag && now < deadline) {
      const int64_t wake = std::min(deadline, instance.NextVisible(now));
      changed_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(1, wake - now)));
      now = clock_->NowUnixMs();
      value = value_at(now);
    }
  }
  response.set_header("Metadata-Flavor", "Google");
  response.set_header("ETag", etag_of(value));
  response.set_content(value, "application/text");
}

void MetadataEmulator::HandleAzure(Instance& instance, const std::string& instance_id,
                                   const std::string& path, const httplib::Request& request,
                                   httplib::Response& response) {
  if (request.get_header_value("Metadata") != "true") {
    response.status = 400;
    response.set_content(R"({"error":"Bad request. Required metadata header not specified"})",
                         "application/json");
    return;
  }
  if (!request.has_param("api-version")) {
    response.status = 400;
    response.set_content(R"({"error":"Bad request. api-version was not specified"})",
                         "application/json");
    return;
  }
  const std::string vm_name = EmulatedAzureVmName(instance_id);
  if (path == "/metadata/instance/compute") {
    if (request.method != "GET") {
      response.status = 405;
      return;
    }
    response.set_content(Json{{"name", vm_name},
                              {"location", "eastus"},
                              {"resourceGroupName", "spotdnn-emulated"},
                              {"vmSize", "Standard_NC6s_v3"},
                              {"priority", "Spot"},
                              {"osType", "Linux"},
                              {"vmScaleSetName", ""}}
                             .dump(),
                         "application/json");
    return;
  }
  const int64_t now = clock_->NowUnixMs();
  // The Azure events this instance's document shows: its own, and those scheduled for every
  // instance (one availability set); each with the name of the instance it is for.
  std::vector<std::pair<Instance::Scheduled*, std::string>> shown;
  for (auto& [id, other] : instances_) {
    for (Instance::Scheduled& s : other->notices) {
      if (s.notice.cloud != Cloud::kAzure || s.notice.visible_at_unix_ms > now) continue;
      if (other.get() == &instance || s.notice.azure_all_instances) {
        shown.emplace_back(&s, EmulatedAzureVmName(id));
      }
    }
  }
  if (request.method == "POST") {
    auto ids = ParseAzureStartRequests(request.body);
    if (!ids.ok()) {
      response.status = 400;
      response.set_content(Json{{"error", std::string(ids.status().message())}}.dump(),
                           "application/json");
      return;
    }
    // Any VM that sees an event may approve it (which starts it for every VM it names).
    for (const std::string& id : *ids) {
      for (auto& [s, name] : shown) {
        if (s->azure_event_id == id && !s->acked) {
          s->acked = true;
          instance.stats.azure_acks.push_back(id);
        }
      }
    }
    response.status = 200;
    return;
  }
  Json events = Json::array();
  int acked = 0;
  for (const auto& [s, name] : shown) {
    acked += s->acked ? 1 : 0;
    events.push_back(Json{{"EventId", s->azure_event_id},
                          {"EventType", s->notice.action},
                          {"ResourceType", "VirtualMachine"},
                          {"Resources", Json::array({name})},
                          {"EventStatus", s->acked ? "Started" : "Scheduled"},
                          {"NotBefore", s->acked ? "" : HttpDate(s->notice.effective_unix_ms)},
                          {"Description", s->notice.kind == EventKind::kNotice
                                              ? "The virtual machine is being evicted."
                                              : "Planned maintenance."},
                          {"EventSource", "Platform"},
                          {"DurationInSeconds", -1}});
  }
  // Changes with every event shown, started or cleared.
  const int64_t incarnation = 1 + static_cast<int64_t>(shown.size()) + acked + clears_;
  response.set_content(Json{{"DocumentIncarnation", incarnation}, {"Events", events}}.dump(),
                       "application/json");
}

void MetadataEmulator::HandleControl(const httplib::Request& request, httplib::Response& response) {
  auto fail = [&](const std::string& message) {
    response.status = 400;
    response.set_content(message + "\n", "text/plain");
  };
  const std::string instance_id = request.get_param_value("instance");
  auto int_param = [&](const char* name, int64_t* out) {
    if (!request.has_param(name)) return true;
    return absl::SimpleAtoi(request.get_param_value(name), out);
  };
  if (request.path == "/emulator/notice") {
    EmulatedNotice notice;
    auto cloud = ParseCloud("cloud", request.get_param_value("cloud"));
    if (!cloud.ok()) return fail(std::string(cloud.status().message()));
    notice.cloud = *cloud;
    const std::string kind =
        request.has_param("kind") ? request.get_param_value("kind") : std::string("notice");
    if (kind == "notice") {
      notice.kind = EventKind::kNotice;
    } else if (kind == "rebalance") {
      notice.kind = EventKind::kRebalance;
    } else if (kind == "maintenance") {
      notice.kind = EventKind::kMaintenance;
    } else {
      return fail("kind = \"" + kind + "\": expected notice, rebalance or maintenance");
    }
    notice.action = request.get_param_value("action");
    int64_t in_ms = 0, effective_in_ms = 0, at_ms = 0;
    if (!int_param("in_ms", &in_ms)) return fail("in_ms: expected an integer");
    if (!int_param("at_ms", &at_ms)) return fail("at_ms: expected an integer");
    if (!int_param("effective_in_ms", &effective_in_ms)) {
      return fail("effective_in_ms: expected an integer");
    }
    const int64_t now = clock_->NowUnixMs();
    notice.visible_at_unix_ms = at_ms > 0 ? at_ms : now + in_ms;
    if (effective_in_ms > 0) notice.effective_unix_ms = now + effective_in_ms;
    const std::string all = request.get_param_value("all_instances");
    if (all != "" && all != "true" && all != "false") {
      return fail("all_instances = \"" + all + "\": expected true or false");
    }
    notice.azure_all_instances = all == "true";
    ScheduleNotice(instance_id, notice);
    response.set_content("scheduled\n", "text/plain");
    return;
  }
  if (request.path == "/emulator/fault") {
    auto fault = ParseEmulatorFault(request.get_param_value("fault"));
    if (!fault.ok()) return fail(std::string(fault.status().message()));
    int64_t slow_ms = 0;
    if (!int_param("slow_ms", &slow_ms)) return fail("slow_ms: expected an integer");
    SetFault(instance_id, *fault, static_cast<int>(slow_ms), request.get_param_value("path"));
    response.set_content("ok\n", "text/plain");
    return;
  }
  if (request.path == "/emulator/clear") {
    ClearNotices(instance_id);
    response.set_content("ok\n", "text/plain");
    return;
  }
  response.status = 404;
  response.set_content("Not Found", "text/plain");
}

}  // namespace spotdnn::detector
