#include "tests/launcher/fake_gce.h"

#include <httplib.h>

#include <chrono>
#include <optional>
#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "provisioner/launcher/google_auth.h"

namespace spotdnn::launcher::testing {
namespace {

using nlohmann::json;

constexpr char kComputeService[] = "6F81-5844-456A";

json GoogleError(int code, const std::string& status, const std::string& reason,
                 const std::string& message) {
  return {{"error",
           {{"code", code},
            {"message", message},
            {"status", status},
            {"errors",
             json::array({{{"message", message}, {"domain", "global"}, {"reason", reason}}})}}}};
}

void Reply(httplib::Response& response, int status, const json& body) {
  response.status = status;
  response.set_content(body.dump(), "application/json; charset=UTF-8");
}

std::string Str(const json& doc, const char* key) {
  if (!doc.is_object()) return "";
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool Matches(const std::string& text, const char* pattern) {
  return std::regex_match(text, std::regex(pattern));
}

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3S-08:00", t, absl::FixedTimeZone(-8 * 3600));
}

// Why an insert body is not what Compute Engine takes ("" when it is).
std::string InvalidInsert(const json& body, const std::string& zone) {
  if (!body.is_object()) return "the body is not a JSON object";
  const std::string name = Str(body, "name");
  if (!Matches(name, "[a-z]([-a-z0-9]{0,61}[a-z0-9])?")) {
    return "Invalid value for field 'resource.name': '" + name +
           "'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'";
  }
  const std::string machine = Str(body, "machineType");
  if (machine.find("zones/" + zone + "/machineTypes/") == std::string::npos) {
    return "Invalid value for field 'resource.machineType': '" + machine + "'.";
  }
  const json& scheduling = body.value("scheduling", json::object());
  // SPOT (a Spot VM) or STANDARD (on-demand), as Compute Engine takes them.
  const std::string model = Str(scheduling, "provisioningModel");
  if (model == "STANDARD") {
    if (scheduling.contains("instanceTerminationAction")) {
      return "Invalid value for field 'resource.scheduling.instanceTerminationAction': only Spot "
             "VMs take a termination action.";
    }
  } else if (model != "SPOT") {
    return "Invalid value for field 'resource.scheduling.provisioningModel': '" + model + "'.";
  } else {
    const std::string action = Str(scheduling, "instanceTerminationAction");
    if (action != "STOP" && action != "DELETE") {
      return "Invalid value for field 'resource.scheduling.instanceTerminationAction': '" + action +
             "'.";
    }
    if (scheduling.value("automaticRestart", true)) {
      return "Invalid value for field 'resource.scheduling.automaticRestart': Spot VMs cannot "
             "restart automatically.";
    }
  }
  for (const json& a : body.value("guestAccelerators", json::array())) {
    if (Str(a, "acceleratorType").find("zones/" + zone + "/acceleratorTypes/") ==
            std::string::npos ||
        a.value("acceleratorCount", 0) < 1) {
      return "Invalid value for field 'resource.guestAccelerators[0]'.";
    }
    if (Str(scheduling, "onHostMaintenance") != "TERMINATE") {
      return "Instances with guest accelerators do not support live migration.";
    }
  }
  const json& disks = body.value("disks", json::array());
  if (disks.empty() || !disks[0].value("boot", false) ||
      Str(disks[0].value("initializeParams", json::object()), "sourceImage").empty()) {
    return "Invalid value for field 'resource.disks': a boot disk with a sourceImage is required.";
  }
  const json& nics = body.value("networkInterfaces", json::array());
  if (nics.empty() || Str(nics[0], "network").empty()) {
    return "Invalid value for field 'resource.networkInterfaces'.";
  }
  bool script = false;
  const json metadata = body.value("metadata", json::object());
  const json items = metadata.value("items", json::array());
  for (const json& item : items) {
    script = script || (Str(item, "key") == "startup-script" && !Str(item, "value").empty());
  }
  if (!script) return "the fake expects a startup-script metadata item";
  const json labels = body.value("labels", json::object());
  for (const auto& [key, value] : labels.items()) {
    if (!Matches(key, "[a-z][a-z0-9_-]{0,62}") || !value.is_string() ||
        !Matches(value.get<std::string>(), "[a-z0-9_-]{0,63}")) {
      return "Invalid value for field 'resource.labels': '" + key + "'.";
    }
  }
  return "";
}

}  // namespace

FakeGce::FakeGce(Options options)
    : options_(std::move(options)), server_(std::make_unique<httplib::Server>()) {
  auto handler = [this](const httplib::Request& request, httplib::Response& response) {
    Handle(request, response);
  };
  server_->Get(".*", handler);
  server_->Post(".*", handler);
  server_->Delete(".*", handler);
  port_ = server_->bind_to_any_port("127.0.0.1");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

FakeGce::~FakeGce() {
  server_->stop();
  thread_.join();
}

std::string FakeGce::url() const { return absl::StrCat("http://127.0.0.1:", port_); }
std::string FakeGce::compute_url() const { return url() + "/compute/v1"; }
std::string FakeGce::token_url() const { return url() + "/token"; }
std::string FakeGce::billing_url() const { return url() + "/billing/v1"; }

void FakeGce::Inject(Injected error) {
  std::lock_guard<std::mutex> lock(mu_);
  injected_.push_back(std::move(error));
}

void FakeGce::InjectOperationError(const std::string& code, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  operation_errors_.emplace_back(code, message);
}

void FakeGce::SetCapacity(const std::string& zone, const std::string& machine_type, int count) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_[{zone, machine_type}] = count;
}

void FakeGce::SetMachineType(const std::string& name, int cpus, int memory_mb,
                             const std::string& accelerator, int accelerator_count) {
  std::lock_guard<std::mutex> lock(mu_);
  json type = {{"kind", "compute#machineType"},
               {"name", name},
               {"guestCpus", cpus},
               {"memoryMb", memory_mb},
               {"isSharedCpu", false}};
  if (!accelerator.empty()) {
    type["accelerators"] = json::array(
        {{{"guestAcceleratorType", accelerator}, {"guestAcceleratorCount", accelerator_count}}});
  }
  machine_types_[name] = type;
}

void FakeGce::AddSku(json sku) {
  std::lock_guard<std::mutex> lock(mu_);
  skus_.push_back(std::move(sku));
}

void FakeGce::set_page_size(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  page_size_ = n;
}

void FakeGce::set_slow_operations(bool slow) {
  std::lock_guard<std::mutex> lock(mu_);
  slow_operations_ = slow;
}

void FakeGce::ExpireTokens() { tokens_.ExpireAll(); }

std::vector<std::string> FakeGce::refused_assertions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

std::vector<FakeGce::Vm> FakeGce::vms() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Vm> out;
  for (const auto& [name, vm] : vms_) out.push_back(vm);
  return out;
}

std::vector<std::string> FakeGce::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

std::vector<json> FakeGce::inserts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inserts_;
}

bool FakeGce::Preempt(const std::string& name, absl::Duration notice) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (vms_.count(name) == 0) return false;
  }
  host_.Preempt(name, notice, [this, name] { DeleteVm(name); });
  return true;
}

void FakeGce::DeleteVm(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    vms_.erase(name);
  }
  host_.Stop(name);
}

void FakeGce::Handle(const httplib::Request& request, httplib::Response& response) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(request.method + " " + request.target);
  }
  std::optional<Injected> after;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!injected_.empty()) {
      const Injected& next = injected_.front();
      if ((next.method.empty() || next.method == request.method) &&
          (next.path_contains.empty() ||
           request.target.find(next.path_contains) != std::string::npos)) {
        Injected error = next;
        injected_.pop_front();
        if (!error.after_effect) {
          return Reply(response, error.http_status,
                       GoogleError(error.http_status, error.status, error.reason, error.message));
        }
        after = error;
      }
    }
  }
  const std::string& path = request.path;
  if (path == "/token") {
    HandleToken(request, response);
  } else if (absl::StartsWith(path, "/computeMetadata/v1/instance/service-accounts/default/")) {
    if (request.get_header_value("Metadata-Flavor") != "Google") {
      response.status = 403;
      response.set_content("Missing Metadata-Flavor:Google header.", "text/html");
      return;
    }
    response.set_header("Metadata-Flavor", "Google");
    if (absl::EndsWith(path, "/email")) {
      response.set_content(options_.client_email, "application/text");
    } else if (absl::EndsWith(path, "/token")) {
      const absl::Duration lifetime = options_.token_lifetime;
      Reply(response, 200,
            {{"access_token", tokens_.Issue("ya29.metadata-", lifetime)},
             {"expires_in", absl::ToInt64Seconds(lifetime)},
             {"token_type", "Bearer"}});
    } else {
      response.status = 404;
    }
  } else if (absl::StartsWith(path, "/compute/v1/projects/")) {
    HandleCompute(path.substr(std::string("/compute/v1/projects/").size()), request, response);
  } else if (absl::StartsWith(path, "/billing/v1/services/")) {
    HandleSkus(request, response);
  } else {
    Reply(response, 404, GoogleError(404, "NOT_FOUND", "notFound", "No such path " + path));
  }
  if (after) {
    Reply(response, after->http_status,
          GoogleError(after->http_status, after->status, after->reason, after->message));
  }
}

void FakeGce::HandleToken(const httplib::Request& request, httplib::Response& response) {
  std::map<std::string, std::string> form = ParseFormBody(request.body);
  auto refuse = [&](const std::string& error, const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      refused_.push_back(why);
    }
    Reply(response, 400, {{"error", error}, {"error_description", why}});
  };
  if (request.method != "POST" ||
      form["grant_type"] != "urn:ietf:params:oauth:grant-type:jwt-bearer") {
    return refuse("unsupported_grant_type", "Invalid grant_type: " + form["grant_type"]);
  }
  std::vector<std::string> parts = absl::StrSplit(form["assertion"], '.');
  if (parts.size() != 3) return refuse("invalid_request", "Invalid JWT: not three parts");
  absl::StatusOr<std::string> header = Base64UrlDecode(parts[0]);
  absl::StatusOr<std::string> payload = Base64UrlDecode(parts[1]);
  absl::StatusOr<std::string> signature = Base64UrlDecode(parts[2]);
  if (!header.ok() || !payload.ok() || !signature.ok()) {
    return refuse("invalid_request", "Invalid JWT: not base64url");
  }
  json h = json::parse(*header, nullptr, false);
  json claims = json::parse(*payload, nullptr, false);
  if (Str(h, "alg") != "RS256") return refuse("invalid_grant", "Invalid JWT: alg must be RS256");
  if (!VerifyRs256(parts[0] + "." + parts[1], *signature, options_.public_key_pem)) {
    return refuse("invalid_grant", "Invalid JWT Signature.");
  }
  if (Str(claims, "iss") != options_.client_email) {
    return refuse("invalid_grant", "Invalid JWT: unknown issuer " + Str(claims, "iss"));
  }
  if (Str(claims, "aud") != token_url()) {
    return refuse("invalid_grant", "Invalid JWT: aud must be " + token_url());
  }
  if (Str(claims, "scope").empty()) {
    return refuse("invalid_scope", "Invalid OAuth scope or ID token audience provided.");
  }
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  const int64_t iat = claims.value("iat", int64_t{0});
  const int64_t exp = claims.value("exp", int64_t{0});
  if (iat > now + 60 || exp <= now || exp - iat > 3600) {
    return refuse("invalid_grant",
                  "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable "
                  "timeframe. Check your iat and exp values in the JWT claim.");
  }
  const absl::Duration lifetime = options_.token_lifetime;
  Reply(response, 200,
        {{"access_token", tokens_.Issue("ya29.fake-", lifetime)},
         {"expires_in", absl::ToInt64Seconds(lifetime)},
         {"token_type", "Bearer"}});
}

void FakeGce::HandleCompute(const std::string& rest, const httplib::Request& request,
                            httplib::Response& response) {
  if (!tokens_.Valid(request.get_header_value("Authorization"))) {
    return Reply(response, 401,
                 GoogleError(401, "UNAUTHENTICATED", "authError",
                             "Request had invalid authentication credentials. Expected OAuth 2 "
                             "access token, login cookie or other valid authentication "
                             "credential."));
  }
  std::vector<std::string> seg = absl::StrSplit(rest, '/');
  if (seg.empty() || seg[0] != options_.project) {
    return Reply(
        response, 404,
        GoogleError(404, "NOT_FOUND", "notFound",
                    "The resource 'projects/" + (seg.empty() ? "" : seg[0]) + "' was not found"));
  }
  const std::string base = compute_url() + "/projects/" + options_.project;
  std::lock_guard<std::mutex> lock(mu_);
  auto operation = [&](const std::string& zone, const std::string& type, const std::string& target,
                       bool done, const json& error) {
    const std::string name = absl::StrCat("operation-", 1000 + next_id_++, "-fake");
    json op = {{"kind", "compute#operation"},
               {"id", absl::StrCat(7000000 + next_id_)},
               {"name", name},
               {"zone", base + "/zones/" + zone},
               {"operationType", type},
               {"targetLink", base + "/zones/" + zone + "/instances/" + target},
               {"status", done ? "DONE" : "RUNNING"},
               {"progress", done ? 100 : 0},
               {"insertTime", Rfc3339(absl::Now())}};
    if (!error.is_null()) {
      op["error"] = error;
      op["httpErrorStatusCode"] = 503;
      op["httpErrorMessage"] = "SERVICE UNAVAILABLE";
    }
    operations_[name] = op;
    return op;
  };
  auto boot = [&](const std::string& name) {
    for (const json& item : vms_[name].resource["metadata"]["items"]) {
      if (Str(item, "key") == "startup-script") host_.Boot(name, Str(item, "value"));
    }
  };

  // zones/Z/instances
  if (seg.size() == 4 && seg[1] == "zones" && seg[3] == "instances" && request.method == "POST") {
    const std::string zone = seg[2];
    const std::string request_id = request.get_param_value("requestId");
    if (!request_id.empty() &&
        !Matches(request_id, "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")) {
      return Reply(response, 400,
                   GoogleError(400, "INVALID_ARGUMENT", "invalid",
                               "Invalid value for field 'requestId': '" + request_id +
                                   "'. The request id must be a valid UUID."));
    }
    if (auto it = request_ids_.find(request_id); !request_id.empty() && it != request_ids_.end()) {
      return Reply(response, 200, operations_[it->second]);  // the same insert again
    }
    json body = json::parse(request.body, nullptr, false);
    if (std::string why = InvalidInsert(body, zone); !why.empty()) {
      return Reply(response, 400, GoogleError(400, "INVALID_ARGUMENT", "invalid", why));
    }
    const std::string name = Str(body, "name");
    if (vms_.count(name) > 0) {
      return Reply(response, 409,
                   GoogleError(409, "ALREADY_EXISTS", "alreadyExists",
                               "The resource 'projects/" + options_.project + "/zones/" +
                                   vms_[name].zone + "/instances/" + name + "' already exists"));
    }
    const std::string machine =
        Str(body, "machineType").substr(Str(body, "machineType").rfind('/') + 1);
    json error;
    if (!operation_errors_.empty()) {
      auto [code, message] = operation_errors_.front();
      operation_errors_.pop_front();
      error = {{"errors", json::array({{{"code", code}, {"message", message}}})}};
    } else if (auto cap = capacity_.find({zone, machine}); cap != capacity_.end()) {
      if (cap->second <= 0) {
        error = {
            {"errors",
             json::array({{{"code", "ZONE_RESOURCE_POOL_EXHAUSTED"},
                           {"message", "The zone 'projects/" + options_.project + "/zones/" + zone +
                                           "' does not have enough resources available to "
                                           "fulfill the request.  Try a different zone, or "
                                           "try again later."}}})}};
      } else {
        --cap->second;
      }
    }
    const bool done = !slow_operations_ || !error.is_null();
    json op = operation(zone, "insert", name, done, error);
    if (!request_id.empty()) request_ids_[request_id] = Str(op, "name");
    if (error.is_null()) {
      const int n = next_id_++;
      json resource = body;
      resource["kind"] = "compute#instance";
      resource["id"] = absl::StrCat(4000000000000 + n);
      resource["zone"] = base + "/zones/" + zone;
      resource["selfLink"] = base + "/zones/" + zone + "/instances/" + name;
      resource["status"] = done ? "RUNNING" : "PROVISIONING";
      resource["creationTimestamp"] = Rfc3339(absl::Now());
      resource["networkInterfaces"][0]["name"] = "nic0";
      resource["networkInterfaces"][0]["networkIP"] = options_.private_ips_loopback
                                                          ? std::string("127.0.0.1")
                                                          : absl::StrCat("10.128.0.", n % 250 + 2);
      if (resource["networkInterfaces"][0].contains("accessConfigs")) {
        resource["networkInterfaces"][0]["accessConfigs"][0]["natIP"] =
            absl::StrCat("34.1.0.", n % 250 + 2);
      }
      vms_[name] = Vm{.name = name, .zone = zone, .resource = resource, .request_id = request_id};
      inserts_.push_back(body);
      if (done) boot(name);
    }
    return Reply(response, 200, op);
  }
  // zones/Z/instances/N
  if (seg.size() == 5 && seg[1] == "zones" && seg[3] == "instances") {
    const std::string zone = seg[2];
    const std::string name = seg[4];
    auto it = vms_.find(name);
    if (it == vms_.end() || it->second.zone != zone) {
      return Reply(response, 404,
                   GoogleError(404, "NOT_FOUND", "notFound",
                               "The resource 'projects/" + options_.project + "/zones/" + zone +
                                   "/instances/" + name + "' was not found"));
    }
    if (request.method == "GET") return Reply(response, 200, it->second.resource);
    if (request.method == "DELETE") {
      json op = operation(zone, "delete", name, true, json());
      vms_.erase(it);
      host_.Stop(name);
      return Reply(response, 200, op);
    }
  }
  // zones/Z/operations/O[/wait]
  if ((seg.size() == 5 || (seg.size() == 6 && seg[5] == "wait")) && seg[1] == "zones" &&
      seg[3] == "operations") {
    auto it = operations_.find(seg[4]);
    if (it == operations_.end()) {
      return Reply(response, 404, GoogleError(404, "NOT_FOUND", "notFound", "no operation"));
    }
    json& op = it->second;
    if (Str(op, "status") != "DONE" && (seg.size() == 6 || ++operation_polls_[seg[4]] > 1)) {
      op["status"] = "DONE";
      op["progress"] = 100;
      const std::string target = Str(op, "targetLink").substr(Str(op, "targetLink").rfind('/') + 1);
      if (auto vm = vms_.find(target); vm != vms_.end()) {
        vm->second.resource["status"] = "RUNNING";
        boot(target);
      }
    }
    return Reply(response, 200, op);
  }
  // aggregated/instances
  if (seg.size() == 3 && seg[1] == "aggregated" && seg[2] == "instances") {
    const std::string filter = request.get_param_value("filter");
    std::smatch m;
    std::function<bool(const Vm&)> keep;
    if (std::regex_match(filter, m, std::regex(R"re(labels\.([a-z0-9_-]+)\s*=\s*"?([^"]*)"?)re"))) {
      const std::string key = m[1], value = m[2];
      keep = [key, value](const Vm& vm) {
        return Str(vm.resource.value("labels", json::object()), key.c_str()) == value;
      };
    } else if (std::regex_match(filter, m, std::regex(R"(labels\.([a-z0-9_-]+):\*)"))) {
      const std::string key = m[1];
      keep = [key](const Vm& vm) {
        return vm.resource.value("labels", json::object()).contains(key);
      };
    } else if (std::regex_match(filter, m, std::regex(R"re(name\s*=\s*"?([^"]*)"?)re"))) {
      const std::string value = m[1];
      keep = [value](const Vm& vm) { return vm.name == value; };
    } else if (filter.empty()) {
      keep = [](const Vm&) { return true; };
    } else {
      return Reply(response, 400,
                   GoogleError(400, "INVALID_ARGUMENT", "invalid",
                               "Invalid value for field 'filter': '" + filter + "'."));
    }
    std::vector<const Vm*> matching;
    for (const auto& [name, vm] : vms_) {
      if (keep(vm)) matching.push_back(&vm);
    }
    int max_results = 500;
    if (request.has_param("maxResults")) {
      (void)absl::SimpleAtoi(request.get_param_value("maxResults"), &max_results);
    }
    int start = 0;
    (void)absl::SimpleAtoi(request.get_param_value("pageToken"), &start);
    const int end = std::min<int>(matching.size(), start + std::min(max_results, page_size_));
    json items = json::object();
    // Zones with nothing on the page say so, as Compute Engine's aggregated lists do.
    items["zones/europe-west4-a"] = {
        {"warning",
         {{"code", "NO_RESULTS_ON_PAGE"},
          {"message", "There are no results for scope 'zones/europe-west4-a' on this page."}}}};
    for (int i = start; i < end; ++i) {
      items["zones/" + matching[i]->zone]["instances"].push_back(matching[i]->resource);
    }
    json page = {{"kind", "compute#instanceAggregatedList"}, {"items", items}};
    if (end < static_cast<int>(matching.size())) page["nextPageToken"] = absl::StrCat(end);
    return Reply(response, 200, page);
  }
  // zones/Z/machineTypes/M
  if (seg.size() == 5 && seg[1] == "zones" && seg[3] == "machineTypes" && request.method == "GET") {
    auto it = machine_types_.find(seg[4]);
    if (it == machine_types_.end()) {
      return Reply(response, 404,
                   GoogleError(404, "NOT_FOUND", "notFound",
                               "The resource 'projects/" + options_.project + "/zones/" + seg[2] +
                                   "/machineTypes/" + seg[4] + "' was not found"));
    }
    json type = it->second;
    type["zone"] = seg[2];
    return Reply(response, 200, type);
  }
  Reply(response, 404, GoogleError(404, "NOT_FOUND", "notFound", "No such path"));
}

void FakeGce::HandleSkus(const httplib::Request& request, httplib::Response& response) {
  std::vector<std::string> seg = absl::StrSplit(request.path, '/');
  // "", billing, v1, services, S, skus
  if (seg.size() != 6 || seg[4] != kComputeService || seg[5] != "skus") {
    return Reply(response, 404, GoogleError(404, "NOT_FOUND", "notFound", "No such service"));
  }
  std::string key = request.get_header_value("X-Goog-Api-Key");
  if (key.empty()) key = request.get_param_value("key");
  if (key != options_.api_key) {
    json error = GoogleError(400, "INVALID_ARGUMENT", "badRequest",
                             "API key not valid. Please pass a valid API key.");
    error["error"]["details"] = json::array(
        {{{"@type", "type.googleapis.com/google.rpc.ErrorInfo"}, {"reason", "API_KEY_INVALID"}}});
    return Reply(response, 400, error);
  }
  std::lock_guard<std::mutex> lock(mu_);
  int page_size = 5000;
  if (request.has_param("pageSize")) {
    (void)absl::SimpleAtoi(request.get_param_value("pageSize"), &page_size);
  }
  page_size = std::min(page_size, page_size_);
  int start = 0;
  (void)absl::SimpleAtoi(request.get_param_value("pageToken"), &start);
  const int end = std::min<int>(skus_.size(), start + page_size);
  json page = {{"skus", json::array()}, {"nextPageToken", ""}};
  for (int i = start; i < end; ++i) page["skus"].push_back(skus_[i]);
  if (end < static_cast<int>(skus_.size())) page["nextPageToken"] = absl::StrCat(end);
  Reply(response, 200, page);
}

}  // namespace spotdnn::launcher::testing
