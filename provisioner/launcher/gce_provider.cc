#include "provisioner/launcher/gce_provider.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "provisioner/launcher/gce_errors.h"
#include "provisioner/launcher/google_auth.h"
#include "provisioner/launcher/http.h"
#include "provisioner/launcher/http_retry.h"
#include "provisioner/launcher/launch_zones.h"
#include "provisioner/launcher/vm_script.h"

namespace spotdnn::launcher {
namespace {

using nlohmann::json;

constexpr char kDefaultEndpoint[] = "https://compute.googleapis.com/compute/v1";
constexpr char kDefaultBillingEndpoint[] = "https://cloudbilling.googleapis.com/v1";
constexpr char kJobLabel[] = "spotdnn-job";
constexpr char kRoleLabel[] = "spotdnn-role";
constexpr char kIndexLabel[] = "spotdnn-index";
constexpr char kLaunchLabel[] = "spotdnn-launch";
constexpr char kJobMetadata[] = "spotdnn-job";
constexpr char kTypeMetadata[] = "spotdnn-instance-type";

std::string LastSegment(const std::string& url) { return url.substr(url.rfind('/') + 1); }

bool ValidName(absl::string_view name, bool allow_upper) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' ||
                    (allow_upper && absl::ascii_isupper(c));
    if (!ok) return false;
  }
  return true;
}

InstanceState StateOf(const std::string& status) {
  if (status == "RUNNING") return InstanceState::kRunning;
  if (status == "STOPPING" || status == "SUSPENDING") return InstanceState::kShuttingDown;
  if (status == "STOPPED" || status == "SUSPENDED") return InstanceState::kStopped;
  if (status == "TERMINATED") return InstanceState::kTerminated;
  return InstanceState::kPending;  // PROVISIONING, STAGING, REPAIRING
}

std::string MetadataItem(const json& resource, const char* key) {
  auto metadata = resource.find("metadata");
  if (metadata == resource.end() || !metadata->is_object()) return "";
  auto items = metadata->find("items");
  if (items == metadata->end() || !items->is_array()) return "";
  for (const json& item : *items) {
    if (JsonText(item, "key") == key) return JsonText(item, "value");
  }
  return "";
}

std::string Label(const json& resource, const char* key) {
  auto labels = resource.find("labels");
  return labels == resource.end() ? "" : JsonText(*labels, key);
}

}  // namespace

absl::StatusOr<GceMachineSpec> ParseGceInstanceType(const std::string& instance_type) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("instance type \"", instance_type, "\": ", why,
                     " (expected MACHINE_TYPE[+ACCELERATOR[:COUNT]], e.g. "
                     "n1-standard-8+nvidia-tesla-v100:1)"));
  };
  std::vector<std::string> parts = absl::StrSplit(instance_type, '+');
  if (parts.size() > 2) return bad("more than one '+'");
  GceMachineSpec spec;
  spec.machine_type = parts[0];
  if (!ValidName(spec.machine_type, false) || !absl::ascii_islower(spec.machine_type[0])) {
    return bad("the machine type must be lowercase letters, digits and '-'");
  }
  if (parts.size() == 2) {
    std::vector<std::string> accelerator = absl::StrSplit(parts[1], ':');
    if (accelerator.size() > 2) return bad("more than one ':'");
    spec.accelerator_type = accelerator[0];
    if (!ValidName(spec.accelerator_type, false)) {
      return bad("the accelerator type must be lowercase letters, digits and '-'");
    }
    spec.accelerator_count = 1;
    if (accelerator.size() == 2 && (!absl::SimpleAtoi(accelerator[1], &spec.accelerator_count) ||
                                    spec.accelerator_count < 1 || spec.accelerator_count > 16)) {
      return bad("the accelerator count must be a whole number from 1 to 16");
    }
  }
  return spec;
}

absl::StatusOr<std::string> GceRegionOf(const std::string& zone) {
  const size_t dash = zone.rfind('-');
  if (!ValidName(zone, false) || dash == std::string::npos || dash == 0 ||
      zone.size() - dash != 2 || zone.substr(0, dash).find('-') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("zone = \"", zone, "\": expected a zone such as us-central1-a"));
  }
  return zone.substr(0, dash);
}

std::string GceLabelValue(const std::string& text) {
  std::string out;
  for (char c : text.substr(0, 63)) {
    const char lower = absl::ascii_tolower(static_cast<unsigned char>(c));
    out.push_back(absl::ascii_isalnum(static_cast<unsigned char>(lower)) || lower == '-' ||
                          lower == '_'
                      ? lower
                      : '_');
  }
  return out;
}

absl::StatusOr<std::unique_ptr<GceProvider>> GceProvider::Create(Options options) {
  if (options.project.empty()) return absl::InvalidArgumentError("project is empty");
  for (char c : options.project) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '.' || c == ':')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "project = \"", options.project, "\": expected a project id such as my-project-123"));
    }
  }
  absl::StatusOr<std::string> region = GceRegionOf(options.zone);
  if (!region.ok()) return region.status();
  for (const std::string& zone : options.fallback_zones) {
    absl::StatusOr<std::string> other = GceRegionOf(zone);
    if (!other.ok()) return other.status();
  }
  std::string endpoint = options.endpoint_url.empty() ? kDefaultEndpoint : options.endpoint_url;
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  if (UrlOrigin(endpoint).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("endpoint_url = \"", options.endpoint_url,
                                                   "\": expected http(s)://HOST[:PORT]/PATH"));
  }
  std::string billing =
      options.billing_endpoint_url.empty() ? kDefaultBillingEndpoint : options.billing_endpoint_url;
  while (!billing.empty() && billing.back() == '/') billing.pop_back();
  if (UrlOrigin(billing).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("billing_endpoint_url = \"",
                                                   options.billing_endpoint_url,
                                                   "\": expected http(s)://HOST[:PORT]/PATH"));
  }
  if (options.token_source == nullptr) {
    return absl::InvalidArgumentError("token_source is null: Compute Engine calls need a token");
  }
  if (absl::Status s = ValidateCloudRetry(options.retry); !s.ok()) return s;
  if (options.boot_disk_gb < 10) {
    return absl::InvalidArgumentError(
        absl::StrCat("boot_disk_gb = ", options.boot_disk_gb, ": must be >= 10"));
  }
  return std::unique_ptr<GceProvider>(new GceProvider(std::move(options), endpoint, billing));
}

GceProvider::GceProvider(Options options, std::string endpoint_url, std::string billing_url)
    : options_(std::move(options)),
      retry_(options_.retry),
      endpoint_url_(std::move(endpoint_url)),
      billing_url_(std::move(billing_url)) {}

std::vector<std::string> GceProvider::Zones() const {
  std::vector<std::string> zones = {options_.zone};
  for (const std::string& zone : options_.fallback_zones) {
    if (std::find(zones.begin(), zones.end(), zone) == zones.end()) zones.push_back(zone);
  }
  return zones;
}

std::string GceProvider::ZoneUrl(const std::string& zone) const {
  return absl::StrCat(endpoint_url_, "/projects/", options_.project, "/zones/", zone);
}

absl::StatusOr<json> GceProvider::Call(const std::string& method, const std::string& url,
                                       const json* body, const std::string& api_method,
                                       const std::string& instance_type) {
  const std::string what = absl::StrCat("GCE ", api_method);
  HttpRequest request{.method = method, .url = url, .timeout = options_.request_timeout};
  if (body != nullptr) {
    request.headers.emplace_back("Content-Type", "application/json");
    request.body = body->dump();
  }
  BearerTokenSigner bearer(options_.token_source.get());
  absl::StatusOr<HttpResponse> response = SendWithRetries(
      request, what, retry_, &bearer,
      [&](const HttpResponse& answer) -> std::optional<HttpFailure> {
        if (answer.status >= 200 && answer.status < 300) return std::nullopt;
        GoogleApiError error = ParseGoogleApiError(answer.status, answer.body);
        return HttpFailure{
            .status = GoogleErrorToStatus(what, error, GcePermissionFor(api_method), instance_type),
            .retryable = IsRetryableGoogleError(error)};
      });
  if (!response.ok()) return response.status();
  if (response->body.empty()) return json::object();
  json doc = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return absl::InternalError(
        absl::StrCat(what, ": the response is not JSON (", response->body.size(), " bytes)"));
  }
  return doc;
}

absl::Status GceProvider::WaitForOperation(const std::string& zone, const json& operation,
                                           const std::string& instance_type) {
  json op = operation;
  const absl::Time deadline = options_.now() + options_.operation_timeout;
  while (JsonText(op, "status") != "DONE") {
    if (options_.now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("GCE operation ", JsonText(op, "name"), " in ", zone, " not done after ",
                       absl::FormatDuration(options_.operation_timeout)));
    }
    const std::string name = JsonText(op, "name");
    if (name.empty()) return absl::InternalError("GCE: an operation without a name");
    // operations.wait answers when the operation is done or after about two minutes.
    absl::StatusOr<json> next =
        Call("POST", absl::StrCat(ZoneUrl(zone), "/operations/", name, "/wait"), nullptr,
             "zoneOperations.wait");
    if (!next.ok()) return next.status();
    op = *std::move(next);
  }
  auto error = op.find("error");
  if (error == op.end() || !error->is_object()) return absl::OkStatus();
  std::vector<std::string> codes;
  std::vector<std::string> messages;
  for (const json& e : error->value("errors", json::array())) {
    codes.push_back(JsonText(e, "code"));
    messages.push_back(absl::StrCat(JsonText(e, "code"), ": ", JsonText(e, "message")));
  }
  const std::string text = absl::StrCat(
      "GCE instances.insert of ", instance_type, " in ", zone, " failed: ",
      messages.empty() ? JsonText(op, "httpErrorMessage") : absl::StrJoin(messages, "; "));
  const std::string replan = "; re-plan without instance type " + instance_type;
  for (const std::string& code : codes) {
    if (IsGceZoneCapacityCode(code)) {
      return GceZoneCapacity(absl::ResourceExhaustedError(text + replan),
                             absl::StrJoin(messages, "; "));
    }
  }
  for (const std::string& code : codes) {
    if (code == "QUOTA_EXCEEDED") return absl::ResourceExhaustedError(text + replan);
  }
  for (const std::string& code : codes) {
    if (code == "RESOURCE_ALREADY_EXISTS") return absl::AlreadyExistsError(text);
  }
  const int http = op.value("httpErrorStatusCode", 0);
  if (http == 403) return absl::PermissionDeniedError(text);
  if (http >= 500) return absl::UnavailableError(text);
  return absl::InvalidArgumentError(text);
}

absl::StatusOr<json> GceProvider::InstanceResource(const LaunchRequest& request, int index,
                                                   const std::string& name,
                                                   const std::string& zone) const {
  absl::StatusOr<GceMachineSpec> spec = ParseGceInstanceType(request.instance_type);
  if (!spec.ok()) return spec.status();
  const std::string zone_path = "zones/" + zone;
  json resource = {
      {"name", name},
      {"machineType", absl::StrCat(zone_path, "/machineTypes/", spec->machine_type)},
      // On-demand: provisioning model STANDARD (not preemptible, no termination action).
      {"scheduling", request.market == Market::kOnDemand
                         ? json{{"provisioningModel", "STANDARD"},
                                {"onHostMaintenance", "TERMINATE"},
                                {"automaticRestart", true}}
                         : json{{"provisioningModel", "SPOT"},
                                {"instanceTerminationAction", "DELETE"},
                                {"onHostMaintenance", "TERMINATE"},
                                {"automaticRestart", false}}},
      {"disks",
       json::array(
           {{{"boot", true},
             {"autoDelete", true},
             {"type", "PERSISTENT"},
             {"initializeParams",
              {{"sourceImage", options_.image},
               {"diskSizeGb", absl::StrCat(options_.boot_disk_gb)},
               {"diskType", absl::StrCat(zone_path, "/diskTypes/", options_.boot_disk_type)}}}}})},
      {"labels",
       {{kJobLabel, GceLabelValue(request.job_id)},
        {kRoleLabel, std::string(RoleName(request.role))},
        {kIndexLabel, absl::StrCat(index)},
        {kLaunchLabel, LaunchNameStem(request.client_token.empty() ? DefaultClientToken(request)
                                                                   : request.client_token)
                           .substr(8)}}},
  };
  if (spec->accelerator_count > 0) {
    resource["guestAccelerators"] =
        json::array({{{"acceleratorType",
                       absl::StrCat(zone_path, "/acceleratorTypes/", spec->accelerator_type)},
                      {"acceleratorCount", spec->accelerator_count}}});
  }
  json nic = {{"network", options_.network}};
  if (!options_.subnetwork.empty()) nic["subnetwork"] = options_.subnetwork;
  if (options_.external_ip) {
    nic["accessConfigs"] = json::array({{{"type", "ONE_TO_ONE_NAT"}, {"name", "External NAT"}}});
  }
  resource["networkInterfaces"] = json::array({nic});
  if (!options_.service_account.empty()) {
    resource["serviceAccounts"] =
        json::array({{{"email", options_.service_account},
                      {"scopes", json::array({kGoogleCloudPlatformScope})}}});
  }
  const std::string script = VmStartupScript(request, index, name,
                                             {.cloud = "gce",
                                              .metadata_url = "http://metadata.google.internal",
                                              .agent_command = options_.agent_command});
  resource["metadata"] = {
      {"items", json::array({{{"key", "startup-script"}, {"value", script}},
                             {{"key", kJobMetadata}, {"value", request.job_id}},
                             {{"key", kTypeMetadata}, {"value", request.instance_type}}})}};
  return resource;
}

Instance GceProvider::ToInstance(const json& resource) {
  Instance instance;
  instance.id = JsonText(resource, "name");
  const std::string zone = LastSegment(JsonText(resource, "zone"));
  instance.zone = zone;
  if (!zone.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    zone_of_[instance.id] = zone;
  }
  instance.instance_type = MetadataItem(resource, kTypeMetadata);
  if (instance.instance_type.empty()) {
    instance.instance_type = LastSegment(JsonText(resource, "machineType"));
  }
  instance.state = StateOf(JsonText(resource, "status"));
  instance.job_id = MetadataItem(resource, kJobMetadata);
  if (instance.job_id.empty()) instance.job_id = Label(resource, kJobLabel);
  absl::StatusOr<Role> role = ParseRole(Label(resource, kRoleLabel));
  if (role.ok()) instance.role = *role;
  (void)absl::SimpleAtoi(Label(resource, kIndexLabel), &instance.index);
  auto nics = resource.find("networkInterfaces");
  if (nics != resource.end() && nics->is_array() && !nics->empty()) {
    const json& nic = (*nics)[0];
    instance.private_address = JsonText(nic, "networkIP");
    auto access = nic.find("accessConfigs");
    if (access != nic.end() && access->is_array() && !access->empty()) {
      instance.public_address = JsonText((*access)[0], "natIP");
    }
  }
  absl::Time created;
  std::string error;
  if (absl::ParseTime(absl::RFC3339_full, JsonText(resource, "creationTimestamp"), &created,
                      &error)) {
    instance.launch_time = created;
  }
  // The metadata server answers only the VM itself: its agent reports.
  instance.metadata_cloud = "gce";
  if (resource.contains("scheduling") &&
      JsonText(resource["scheduling"], "provisioningModel") == "STANDARD") {
    instance.market = Market::kOnDemand;
  }
  return instance;
}

absl::StatusOr<std::vector<json>> GceProvider::AggregatedList(const std::string& filter) {
  std::vector<json> out;
  std::string page_token;
  for (int page = 0; page < 1000; ++page) {
    std::vector<std::pair<std::string, std::string>> query = {
        {"filter", filter}, {"maxResults", "500"}, {"returnPartialSuccess", "true"}};
    if (!page_token.empty()) query.emplace_back("pageToken", page_token);
    absl::StatusOr<json> body = Call("GET",
                                     absl::StrCat(endpoint_url_, "/projects/", options_.project,
                                                  "/aggregated/instances?", QueryString(query)),
                                     nullptr, "instances.aggregatedList");
    if (!body.ok()) return body.status();
    auto items = body->find("items");
    if (items != body->end() && items->is_object()) {
      for (const auto& [scope, scoped] : items->items()) {
        auto instances = scoped.find("instances");
        if (instances == scoped.end() || !instances->is_array()) continue;
        for (const json& instance : *instances) out.push_back(instance);
      }
    }
    page_token = JsonText(*body, "nextPageToken");
    if (page_token.empty()) return out;
  }
  return absl::InternalError("GCE instances.aggregatedList: more than 1000 pages");
}

absl::StatusOr<LaunchResult> GceProvider::Launch(const LaunchRequest& request) {
  if (absl::Status s = ValidateLaunchRequest(request); !s.ok()) return s;
  if (options_.image.empty()) {
    return absl::InvalidArgumentError(
        "image is empty: give the boot image with your framework and spotdnn-agent (the job "
        "spec's provider.image, e.g. projects/P/global/images/family/F)");
  }
  if (request.command.empty()) return absl::InvalidArgumentError("command is empty");
  absl::StatusOr<GceMachineSpec> spec = ParseGceInstanceType(request.instance_type);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::vector<std::string>> zones_to_try = LaunchZones(
      request, {.provider = "gce", .configured = Zones(), .key = "provider.zone, provider.zones"});
  if (!zones_to_try.ok()) return zones_to_try.status();
  const std::vector<std::string>& zones = *zones_to_try;
  const std::string token =
      request.client_token.empty() ? DefaultClientToken(request) : request.client_token;
  const std::string stem = LaunchNameStem(token);

  // What an earlier try of this launch made, in whichever zone it went.
  absl::StatusOr<std::vector<json>> existing_list =
      AggregatedList(absl::StrCat("labels.", kLaunchLabel, " = \"", stem.substr(8), "\""));
  if (!existing_list.ok()) return existing_list.status();
  std::map<std::string, json> existing;
  for (json& resource : *existing_list) {
    const std::string name = JsonText(resource, "name");  // before the move (json's = takes a copy)
    existing[name] = std::move(resource);
  }

  LaunchResult result;
  result.requested = request.count;
  absl::Status error;
  size_t zone_index = 0;
  for (int i = 0; i < request.count && error.ok(); ++i) {
    const std::string name = absl::StrCat(stem, "-", i);
    if (auto it = existing.find(name); it != existing.end()) {
      result.instances.push_back(ToInstance(it->second));
      continue;
    }
    bool launched = false;
    while (!launched && zone_index < zones.size()) {
      const std::string& zone = zones[zone_index];
      absl::StatusOr<json> resource =
          InstanceResource(request, request.first_index + i, name, zone);
      if (!resource.ok()) return resource.status();
      // The same request id for every retry of this VM in this zone: Compute Engine answers a
      // repeated insert with the first one's operation instead of a second VM.
      absl::StatusOr<json> operation = Call(
          "POST",
          absl::StrCat(ZoneUrl(zone), "/instances?requestId=",
                       DeterministicUuid(absl::StrCat(options_.project, "/", zone, "/", name))),
          &*resource, "instances.insert", request.instance_type);
      absl::Status status = operation.ok()
                                ? WaitForOperation(zone, *operation, request.instance_type)
                                : operation.status();
      if (IsGceZoneCapacity(status)) {
        result.refused_zones.push_back(RefusedZone(zone, GceZoneCapacityWhy(status)));
        ++zone_index;
        continue;
      }
      if (!status.ok() && !absl::IsAlreadyExists(status)) {
        error = status;
        break;
      }
      // Made now, or by an earlier try the listing above did not show yet.
      absl::StatusOr<json> made =
          Call("GET", absl::StrCat(ZoneUrl(zone), "/instances/", name), nullptr, "instances.get");
      if (!made.ok()) {
        error = made.status();
        break;
      }
      Instance instance = ToInstance(*made);
      instance.job_id = request.job_id;
      instance.role = request.role;
      instance.index = request.first_index + i;
      instance.instance_type = request.instance_type;
      result.instances.push_back(std::move(instance));
      launched = true;
    }
    if (!launched && error.ok()) {
      error = absl::ResourceExhaustedError(absl::StrCat(
          "GCE: no capacity for ", request.instance_type, " in zones ", absl::StrJoin(zones, ", "),
          " (", absl::StrJoin(result.refused_zones, "; "), "): launched ", result.instances.size(),
          " of ", request.count, " ", MarketName(request.market), " VMs for job ", request.job_id,
          "; re-plan without instance type ", request.instance_type));
    }
  }
  if (!error.ok() && result.instances.empty()) return error;
  result.error = error;
  return result;
}

absl::StatusOr<std::vector<Instance>> GceProvider::Describe(const std::string& job_id) {
  const std::string filter =
      job_id.empty() ? absl::StrCat("labels.", kJobLabel, ":*")
                     : absl::StrCat("labels.", kJobLabel, " = \"", GceLabelValue(job_id), "\"");
  absl::StatusOr<std::vector<json>> listed = AggregatedList(filter);
  if (!listed.ok()) return listed.status();
  std::vector<Instance> out;
  for (const json& resource : *listed) {
    Instance instance = ToInstance(resource);
    // Labels are lowercased: the exact job id is in the metadata.
    if (!job_id.empty() && instance.job_id != job_id) continue;
    out.push_back(std::move(instance));
  }
  return out;
}

absl::Status GceProvider::Terminate(const std::vector<std::string>& instance_ids) {
  for (size_t i = 0; i < instance_ids.size(); ++i) {
    if (instance_ids[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("instance_ids[", i, "] is empty"));
    }
  }
  std::vector<std::string> unknown;
  const std::string call_key = absl::StrCat(absl::ToUnixNanos(absl::Now()));
  for (const std::string& id : instance_ids) {
    std::string zone;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = zone_of_.find(id); it != zone_of_.end()) zone = it->second;
    }
    if (zone.empty()) {
      absl::StatusOr<std::vector<json>> found = AggregatedList(absl::StrCat("name = \"", id, "\""));
      if (!found.ok()) return found.status();
      for (const json& resource : *found) {
        if (JsonText(resource, "name") == id) zone = LastSegment(JsonText(resource, "zone"));
      }
    }
    if (zone.empty()) {
      unknown.push_back(id);
      continue;
    }
    absl::StatusOr<json> deleted = Call(
        "DELETE",
        absl::StrCat(ZoneUrl(zone), "/instances/", id,
                     "?requestId=", DeterministicUuid(absl::StrCat("delete/", id, "/", call_key))),
        nullptr, "instances.delete");
    if (absl::IsNotFound(deleted.status())) {
      unknown.push_back(id);
      std::lock_guard<std::mutex> lock(mu_);
      zone_of_.erase(id);
      continue;
    }
    if (!deleted.ok()) return deleted.status();
  }
  if (unknown.empty()) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("GCE instances.delete: unknown instance(s) ",
                                          absl::StrJoin(unknown, ", "), " in project ",
                                          options_.project, "; the others were deleted"));
}

}  // namespace spotdnn::launcher
