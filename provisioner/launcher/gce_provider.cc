#include "provisioner/launcher/gce_provider.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "provisioner/launcher/google_auth.h"
#include "provisioner/launcher/http.h"
#include "provisioner/launcher/http_retry.h"
#include "provisioner/launcher/vm_script.h"

namespace spotdnn::launcher {
namespace {

using nlohmann::json;

constexpr char kDefaultEndpoint[] = "https://compute.googleapis.com/compute/v1";
constexpr char kDefaultBillingEndpoint[] = "https://cloudbilling.googleapis.com/v1";
// The Billing Catalog's service id of Compute Engine.
constexpr char kComputeEngineService[] = "6F81-5844-456A";
constexpr char kJobLabel[] = "spotdnn-job";
constexpr char kRoleLabel[] = "spotdnn-role";
constexpr char kIndexLabel[] = "spotdnn-index";
constexpr char kLaunchLabel[] = "spotdnn-launch";
constexpr char kJobMetadata[] = "spotdnn-job";
constexpr char kTypeMetadata[] = "spotdnn-instance-type";
// Marks a status as "this zone has no capacity": the launch tries the next zone.
constexpr char kZoneCapacityPayload[] = "spotdnn.dev/gce-zone-capacity";

// The IAM permissions each API method needs, named in PERMISSION_DENIED errors.
std::string PermissionFor(const std::string& api_method) {
  static const std::map<std::string, std::string> kPermissions = {
      {"instances.insert",
       "compute.instances.create (with compute.disks.create, compute.subnetworks.use, "
       "compute.subnetworks.useExternalIp, compute.instances.setMetadata, "
       "compute.instances.setLabels, compute.instances.setServiceAccount and "
       "iam.serviceAccounts.actAs: roles/compute.instanceAdmin.v1 and "
       "roles/iam.serviceAccountUser)"},
      {"instances.get", "compute.instances.get"},
      {"instances.aggregatedList", "compute.instances.list"},
      {"instances.delete", "compute.instances.delete"},
      {"zoneOperations.wait", "compute.zoneOperations.get"},
      {"machineTypes.get", "compute.machineTypes.get"},
  };
  auto it = kPermissions.find(api_method);
  return it == kPermissions.end() ? api_method : it->second;
}

bool IsZoneCapacityCode(absl::string_view text) {
  return absl::StrContains(text, "ZONE_RESOURCE_POOL_EXHAUSTED") ||
         absl::StrContains(text, "RESOURCE_POOL_EXHAUSTED") ||
         absl::StrContains(text, "does not have enough resources available");
}

absl::Status ZoneCapacity(absl::Status status) {
  status.SetPayload(kZoneCapacityPayload, absl::Cord("1"));
  return status;
}

bool IsZoneCapacity(const absl::Status& status) {
  return status.GetPayload(kZoneCapacityPayload).has_value();
}

std::string Text(const json& doc, const char* key) {
  if (!doc.is_object()) return "";
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

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
    if (Text(item, "key") == key) return Text(item, "value");
  }
  return "";
}

std::string Label(const json& resource, const char* key) {
  auto labels = resource.find("labels");
  return labels == resource.end() ? "" : Text(*labels, key);
}

// A Google API error as a status. `what` names the call.
absl::Status GoogleErrorToStatus(const std::string& what, const GoogleApiError& error,
                                 const std::string& permission, const std::string& instance_type) {
  std::string text = absl::StrCat(what, ": HTTP ", error.http_status);
  if (!error.status.empty()) absl::StrAppend(&text, " ", error.status);
  if (!error.reason.empty()) absl::StrAppend(&text, " (", error.reason, ")");
  if (!error.message.empty()) absl::StrAppend(&text, ": ", error.message);
  const std::string replan =
      instance_type.empty() ? "" : "; re-plan without instance type " + instance_type;
  if (IsZoneCapacityCode(error.message) || IsZoneCapacityCode(error.reason)) {
    return ZoneCapacity(absl::ResourceExhaustedError(text + replan));
  }
  if (error.reason == "quotaExceeded" || absl::StrContains(error.message, "QUOTA_EXCEEDED")) {
    return absl::ResourceExhaustedError(text + replan);
  }
  switch (error.http_status) {
    case 400:
      return absl::InvalidArgumentError(text);
    case 401:
      return absl::UnauthenticatedError(text);
    case 403:
      if (error.reason == "rateLimitExceeded" || error.reason == "userRateLimitExceeded") {
        return absl::UnavailableError(text);
      }
      return absl::PermissionDeniedError(absl::StrCat(text, "; the account needs ", permission));
    case 404:
      return absl::NotFoundError(text);
    case 409:
      if (error.reason == "alreadyExists" || error.status == "ALREADY_EXISTS") {
        return absl::AlreadyExistsError(text);
      }
      return absl::FailedPreconditionError(text);
    case 412:
      return absl::FailedPreconditionError(text);
    default:
      break;
  }
  if (error.http_status == 429 || error.http_status >= 500) return absl::UnavailableError(text);
  return absl::FailedPreconditionError(text);
}

bool IsRetryable(const GoogleApiError& error) {
  if (IsZoneCapacityCode(error.message)) return false;
  return error.http_status == 429 || error.http_status >= 500 ||
         (error.http_status == 403 &&
          (error.reason == "rateLimitExceeded" || error.reason == "userRateLimitExceeded"));
}

RetryPolicy RetryOf(const GceProvider::Options& options) {
  return {.max_attempts = options.max_attempts,
          .backoff_base = options.backoff_base,
          .backoff_cap = options.backoff_cap,
          .sleep = options.sleep};
}

// A Cloud Billing Catalog error that is not worth retrying as a status; `text` describes it.
absl::Status BillingErrorToStatus(long http_status, const GoogleApiError& error,
                                  const std::string& text) {
  if (http_status == 400 && absl::StrContains(absl::AsciiStrToLower(error.message), "api key")) {
    return absl::UnauthenticatedError(absl::StrCat(text, "; check the API key"));
  }
  if (http_status == 400) return absl::InvalidArgumentError(text);
  if (http_status == 401) return absl::UnauthenticatedError(text);
  if (http_status == 403) {
    return absl::PermissionDeniedError(
        absl::StrCat(text,
                     "; enable the Cloud Billing API (cloudbilling.googleapis.com) in the API "
                     "key's project and allow the key to call it"));
  }
  if (http_status == 404) return absl::NotFoundError(text);
  return absl::FailedPreconditionError(text);
}

// A price from a Google Money-like object ({"units": "1", "nanos": 500000000}).
double MoneyOf(const json& money) {
  double units = 0;
  auto u = money.find("units");
  if (u != money.end()) {
    if (u->is_string()) {
      (void)absl::SimpleAtod(u->get<std::string>(), &units);
    } else if (u->is_number()) {
      units = u->get<double>();
    }
  }
  auto n = money.find("nanos");
  const double nanos = n != money.end() && n->is_number() ? n->get<double>() : 0;
  return units + nanos / 1e9;
}

// "Spot Preemptible Nvidia Tesla V100 GPU running in Americas" -> "v100 gpu" (and whether it was
// the "Spot Preemptible" name); empty when it is not a preemptible SKU description.
std::pair<std::string, bool> NormalizedSku(const std::string& description) {
  const std::string lower = absl::AsciiStrToLower(description);
  absl::string_view view = lower;
  const bool spot = absl::ConsumePrefix(&view, "spot preemptible ");
  if (!spot && !absl::ConsumePrefix(&view, "preemptible ")) return {"", false};
  std::string text(view.substr(0, view.find(" running in ")));
  std::vector<std::string> words;
  for (absl::string_view w : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (w == "nvidia" || w == "tesla") continue;
    words.emplace_back(w);
  }
  return {absl::StrJoin(words, " "), spot};
}

std::string AcceleratorKey(const std::string& accelerator_type) {
  std::vector<std::string> words;
  for (absl::string_view w : absl::StrSplit(accelerator_type, '-', absl::SkipEmpty())) {
    if (w == "nvidia" || w == "tesla") continue;
    words.emplace_back(w);
  }
  return absl::StrCat(absl::StrJoin(words, " "), " gpu");
}

// The per-unit price of the tier starting at 0 of a SKU's first pricing info; -1 when absent or
// in another unit than `unit`.
double UnitPrice(const json& sku, const std::string& unit) {
  auto info = sku.find("pricingInfo");
  if (info == sku.end() || !info->is_array() || info->empty()) return -1;
  const json& expression = (*info)[0].value("pricingExpression", json::object());
  if (Text(expression, "usageUnit") != unit) return -1;
  auto rates = expression.find("tieredRates");
  if (rates == expression.end() || !rates->is_array()) return -1;
  for (const json& rate : *rates) {
    const double start = rate.value("startUsageAmount", 0.0);
    if (start == 0 && rate.contains("unitPrice")) return MoneyOf(rate["unitPrice"]);
  }
  return -1;
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

GoogleApiError ParseGoogleApiError(long http_status, const std::string& body) {
  GoogleApiError out;
  out.http_status = http_status;
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("error")) return out;
  const json& error = doc["error"];
  if (error.is_string()) {  // OAuth-style {"error": "invalid_grant"}
    out.reason = error.get<std::string>();
    out.message = Text(doc, "error_description");
    return out;
  }
  out.status = Text(error, "status");
  out.message = Text(error, "message");
  auto errors = error.find("errors");
  if (errors != error.end() && errors->is_array() && !errors->empty()) {
    out.reason = Text((*errors)[0], "reason");
  }
  // Newer errors carry the reason in details[].reason (google.rpc.ErrorInfo).
  auto details = error.find("details");
  if (out.reason.empty() && details != error.end() && details->is_array()) {
    for (const json& d : *details) {
      if (!Text(d, "reason").empty()) {
        out.reason = Text(d, "reason");
        break;
      }
    }
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
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_attempts = ", options.max_attempts, ": must be >= 1"));
  }
  if (options.boot_disk_gb < 10) {
    return absl::InvalidArgumentError(
        absl::StrCat("boot_disk_gb = ", options.boot_disk_gb, ": must be >= 10"));
  }
  if (!options.sleep) options.sleep = [](absl::Duration d) { absl::SleepFor(d); };
  return std::unique_ptr<GceProvider>(new GceProvider(std::move(options), endpoint, billing));
}

GceProvider::GceProvider(Options options, std::string endpoint_url, std::string billing_url)
    : options_(std::move(options)),
      endpoint_url_(std::move(endpoint_url)),
      billing_url_(std::move(billing_url)) {}

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
  absl::StatusOr<HttpResponse> response = SendWithRetries(
      request, what, RetryOf(options_), options_.token_source.get(),
      [&](const HttpResponse& answer) -> std::optional<HttpFailure> {
        if (answer.status >= 200 && answer.status < 300) return std::nullopt;
        GoogleApiError error = ParseGoogleApiError(answer.status, answer.body);
        return HttpFailure{
            .status = GoogleErrorToStatus(what, error, PermissionFor(api_method), instance_type),
            .retryable = IsRetryable(error)};
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
  while (Text(op, "status") != "DONE") {
    if (options_.now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("GCE operation ", Text(op, "name"), " in ", zone, " not done after ",
                       absl::FormatDuration(options_.operation_timeout)));
    }
    const std::string name = Text(op, "name");
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
    codes.push_back(Text(e, "code"));
    messages.push_back(absl::StrCat(Text(e, "code"), ": ", Text(e, "message")));
  }
  const std::string text = absl::StrCat(
      "GCE instances.insert of ", instance_type, " in ", zone,
      " failed: ", messages.empty() ? Text(op, "httpErrorMessage") : absl::StrJoin(messages, "; "));
  const std::string replan = "; re-plan without instance type " + instance_type;
  for (const std::string& code : codes) {
    if (IsZoneCapacityCode(code)) return ZoneCapacity(absl::ResourceExhaustedError(text + replan));
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
      {"scheduling",
       {{"provisioningModel", "SPOT"},
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
  instance.id = Text(resource, "name");
  const std::string zone = LastSegment(Text(resource, "zone"));
  if (!zone.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    zone_of_[instance.id] = zone;
  }
  instance.instance_type = MetadataItem(resource, kTypeMetadata);
  if (instance.instance_type.empty()) {
    instance.instance_type = LastSegment(Text(resource, "machineType"));
  }
  instance.state = StateOf(Text(resource, "status"));
  instance.job_id = MetadataItem(resource, kJobMetadata);
  if (instance.job_id.empty()) instance.job_id = Label(resource, kJobLabel);
  absl::StatusOr<Role> role = ParseRole(Label(resource, kRoleLabel));
  if (role.ok()) instance.role = *role;
  (void)absl::SimpleAtoi(Label(resource, kIndexLabel), &instance.index);
  auto nics = resource.find("networkInterfaces");
  if (nics != resource.end() && nics->is_array() && !nics->empty()) {
    const json& nic = (*nics)[0];
    instance.private_address = Text(nic, "networkIP");
    auto access = nic.find("accessConfigs");
    if (access != nic.end() && access->is_array() && !access->empty()) {
      instance.public_address = Text((*access)[0], "natIP");
    }
  }
  absl::Time created;
  std::string error;
  if (absl::ParseTime(absl::RFC3339_full, Text(resource, "creationTimestamp"), &created, &error)) {
    instance.launch_time = created;
  }
  // The metadata server answers only the VM itself: its agent reports.
  instance.metadata_cloud = "gce";
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
    page_token = Text(*body, "nextPageToken");
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
  const std::string token =
      request.client_token.empty() ? DefaultClientToken(request) : request.client_token;
  const std::string stem = LaunchNameStem(token);

  // What an earlier try of this launch made, in whichever zone it went.
  absl::StatusOr<std::vector<json>> existing_list =
      AggregatedList(absl::StrCat("labels.", kLaunchLabel, " = \"", stem.substr(8), "\""));
  if (!existing_list.ok()) return existing_list.status();
  std::map<std::string, json> existing;
  for (json& resource : *existing_list) {
    const std::string name = Text(resource, "name");  // before the move (json's = takes a copy)
    existing[name] = std::move(resource);
  }

  std::vector<std::string> zones = {options_.zone};
  for (const std::string& zone : options_.fallback_zones) {
    if (std::find(zones.begin(), zones.end(), zone) == zones.end()) zones.push_back(zone);
  }
  LaunchResult result;
  result.requested = request.count;
  absl::Status error;
  std::vector<std::string> exhausted_zones;
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
      if (IsZoneCapacity(status)) {
        exhausted_zones.push_back(zone);
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
          "GCE: no capacity for ", request.instance_type, " in ",
          absl::StrJoin(exhausted_zones, ", "), " (ZONE_RESOURCE_POOL_EXHAUSTED): launched ",
          result.instances.size(), " of ", request.count, " spot VMs for job ", request.job_id,
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
        if (Text(resource, "name") == id) zone = LastSegment(Text(resource, "zone"));
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

absl::StatusOr<std::vector<SpotPrice>> GceProvider::SpotPrices(
    const std::vector<std::string>& instance_types, const std::string& region_arg) {
  if (instance_types.empty()) return std::vector<SpotPrice>{};
  std::string region = region_arg;
  if (region.empty()) {
    absl::StatusOr<std::string> of_zone = GceRegionOf(options_.zone);
    if (!of_zone.ok()) return of_zone.status();
    region = *of_zone;
  }
  if (options_.api_key.empty()) {
    return absl::InvalidArgumentError(
        "api_key is empty: the Cloud Billing Catalog API needs an API key (--api-key-file FILE "
        "or $GOOGLE_API_KEY)");
  }
  // What each type is made of.
  struct Shape {
    double cpus = 0;
    double memory_gib = 0;
    std::string family;               // "n1"
    std::map<std::string, int> gpus;  // accelerator type -> count
  };
  std::map<std::string, Shape> shapes;
  for (const std::string& type : instance_types) {
    absl::StatusOr<GceMachineSpec> spec = ParseGceInstanceType(type);
    if (!spec.ok()) return spec.status();
    absl::StatusOr<json> machine =
        Call("GET", absl::StrCat(ZoneUrl(options_.zone), "/machineTypes/", spec->machine_type),
             nullptr, "machineTypes.get");
    if (!machine.ok()) return machine.status();
    Shape shape;
    shape.cpus = machine->value("guestCpus", 0.0);
    shape.memory_gib = machine->value("memoryMb", 0.0) / 1024.0;
    shape.family = spec->machine_type.substr(0, spec->machine_type.find('-'));
    for (const json& a : machine->value("accelerators", json::array())) {
      shape.gpus[Text(a, "guestAcceleratorType")] += a.value("guestAcceleratorCount", 0);
    }
    if (spec->accelerator_count > 0) shape.gpus[spec->accelerator_type] += spec->accelerator_count;
    if (shape.cpus <= 0 || shape.memory_gib <= 0) {
      return absl::InternalError(absl::StrCat("GCE machineTypes.get ", spec->machine_type,
                                              ": no guestCpus or memoryMb in the answer"));
    }
    shapes[type] = shape;
  }

  // Every preemptible Compute Engine SKU of the region, by normalized description.
  struct Rate {
    double price = -1;
    bool spot = false;  // a "Spot Preemptible" SKU (preferred over a plain "Preemptible" one)
  };
  std::map<std::string, Rate> rates;  // "n1 predefined instance core" -> price per unit
  std::string page_token;
  for (int page = 0;; ++page) {
    if (page >= 1000) return absl::InternalError("Cloud Billing Catalog: more than 1000 pages");
    std::vector<std::pair<std::string, std::string>> query = {{"currencyCode", "USD"},
                                                              {"pageSize", "5000"}};
    if (!page_token.empty()) query.emplace_back("pageToken", page_token);
    const std::string url = absl::StrCat(billing_url_, "/services/", kComputeEngineService,
                                         "/skus?", QueryString(query));
    absl::StatusOr<HttpResponse> response = SendWithRetries(
        {.url = url,
         .headers = {{"X-Goog-Api-Key", options_.api_key}},
         .timeout = options_.request_timeout},
        "Cloud Billing Catalog", RetryOf(options_), /*tokens=*/nullptr,
        [&](const HttpResponse& answer) -> std::optional<HttpFailure> {
          if (answer.status == 200) return std::nullopt;
          GoogleApiError error = ParseGoogleApiError(answer.status, answer.body);
          std::string text =
              absl::StrCat("Cloud Billing Catalog services.skus.list: HTTP ", answer.status, " ",
                           error.status, error.message.empty() ? "" : ": ", error.message);
          if (IsRetryable(error)) {
            return HttpFailure{.status = absl::UnavailableError(text), .retryable = true};
          }
          return HttpFailure{.status = BillingErrorToStatus(answer.status, error, text)};
        });
    if (!response.ok()) return response.status();
    json doc = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) {
      return absl::InternalError("Cloud Billing Catalog: the response is not a JSON object");
    }
    for (const json& sku : doc.value("skus", json::array())) {
      const json& category = sku.value("category", json::object());
      if (Text(category, "resourceFamily") != "Compute" ||
          Text(category, "usageType") != "Preemptible") {
        continue;
      }
      const json& regions = sku.value("serviceRegions", json::array());
      if (std::find(regions.begin(), regions.end(), region) == regions.end()) continue;
      auto [key, spot] = NormalizedSku(Text(sku, "description"));
      if (key.empty()) continue;
      const std::string unit = absl::EndsWith(key, " ram") ? "GiBy.h" : "h";
      const double price = UnitPrice(sku, unit);
      if (price < 0) continue;
      Rate& rate = rates[key];
      if (rate.price < 0 || (spot && !rate.spot)) rate = {price, spot};
    }
    page_token = Text(doc, "nextPageToken");
    if (page_token.empty()) break;
  }
  auto rate_of = [&](const std::vector<std::string>& keys) {
    for (const std::string& key : keys) {
      auto it = rates.find(key);
      if (it != rates.end()) return it->second.price;
    }
    return -1.0;
  };

  std::vector<SpotPrice> out;
  const absl::Time now = options_.now();
  for (const auto& [type, shape] : shapes) {
    const std::string f = shape.family;
    const double core =
        rate_of({f + " predefined instance core", f + " instance core", f + " amd instance core"});
    const double ram =
        rate_of({f + " predefined instance ram", f + " instance ram", f + " amd instance ram"});
    if (core < 0 || ram < 0) continue;
    double price = shape.cpus * core + shape.memory_gib * ram;
    bool priced = true;
    for (const auto& [accelerator, count] : shape.gpus) {
      const double gpu = rate_of({AcceleratorKey(accelerator)});
      if (gpu < 0) priced = false;
      price += count * gpu;
    }
    if (!priced) continue;
    out.push_back({.instance_type = type,
                   .availability_zone = region,
                   .price_per_hour = price,
                   .timestamp = now});
  }
  return out;
}

}  // namespace spotdnn::launcher
