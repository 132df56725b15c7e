// The Azure provider: ARM calls (bearer token, errors by code), the VM resource of a launch,
// creation, describe and terminate, and spot prices from the retail prices API.
#include "provisioner/launcher/azure_provider.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "provisioner/launcher/http_retry.h"
#include "provisioner/launcher/launch_zones.h"
#include "provisioner/launcher/vm_script.h"

namespace spotdnn::launcher {
namespace {

using nlohmann::json;

constexpr char kDefaultEndpoint[] = "https://management.azure.com";
constexpr char kDefaultPricesUrl[] = "https://prices.azure.com/api/retail/prices";
constexpr char kJobTag[] = "spotdnn-job";
constexpr char kRoleTag[] = "spotdnn-role";
constexpr char kIndexTag[] = "spotdnn-index";
constexpr char kTypeTag[] = "spotdnn-instance-type";
constexpr char kLaunchTag[] = "spotdnn-launch";

std::string Text(const json& doc, const char* key) {
  if (!doc.is_object()) return "";
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

const json& Child(const json& doc, const char* key) {
  static const json* empty = new json(json::object());
  if (!doc.is_object()) return *empty;
  auto it = doc.find(key);
  return it == doc.end() ? *empty : *it;
}

bool IsCapacityCode(const std::string& code, const std::string& message) {
  static const std::set<std::string> kCapacity = {"SkuNotAvailable",
                                                  "AllocationFailed",
                                                  "ZonalAllocationFailed",
                                                  "OverconstrainedAllocationRequest",
                                                  "OverconstrainedZonalAllocationRequest",
                                                  "SpotPriceGreaterThanProvidedMaxPrice",
                                                  "QuotaExceeded"};
  if (kCapacity.count(code) > 0) return true;
  // A core quota answers OperationNotAllowed "... exceeding approved ... quota".
  return code == "OperationNotAllowed" &&
         absl::StrContains(absl::AsciiStrToLower(message), "quota");
}

// The capacity codes that are about where the VM would go: another zone may have the size.
// (Price and quota refusals hold for the whole location.)
bool IsZoneCapacityCode(const std::string& code) {
  static const std::set<std::string> kZone = {
      "SkuNotAvailable", "AllocationFailed", "ZonalAllocationFailed",
      "OverconstrainedAllocationRequest", "OverconstrainedZonalAllocationRequest"};
  return kZone.count(code) > 0;
}

// Marks a status as "this zone has no capacity"; the payload is the ARM code and message.
constexpr char kZoneCapacityPayload[] = "spotdnn.dev/azure-zone-capacity";

absl::Status CapacityStatus(const std::string& text, const ArmError& error,
                            const std::string& instance_type) {
  absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
      text, instance_type.empty() ? "" : "; re-plan without instance type " + instance_type));
  if (IsZoneCapacityCode(error.code)) {
    status.SetPayload(
        kZoneCapacityPayload,
        absl::Cord(absl::StrCat(error.code, error.message.empty() ? "" : ": ", error.message)));
  }
  return status;
}

std::optional<std::string> ZoneCapacity(const absl::Status& status) {
  auto why = status.GetPayload(kZoneCapacityPayload);
  if (!why.has_value()) return std::nullopt;
  return std::string(*why);
}

bool AllDigits(absl::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return absl::ascii_isdigit(c); });
}

// The RBAC action each call needs, named in PERMISSION_DENIED errors.
std::string ActionFor(const std::string& action) {
  static const std::map<std::string, std::string> kActions = {
      {"virtualMachines/write",
       "Microsoft.Compute/virtualMachines/write (with Microsoft.Network/networkInterfaces/write, "
       "Microsoft.Network/virtualNetworks/subnets/join/action and Microsoft.Compute/disks/write: "
       "the Virtual Machine Contributor role on the resource group and Network Contributor on "
       "the subnet)"},
      {"virtualMachines/read", "Microsoft.Compute/virtualMachines/read"},
      {"virtualMachines/delete", "Microsoft.Compute/virtualMachines/delete"},
      {"networkInterfaces/read", "Microsoft.Network/networkInterfaces/read"},
      {"locations/operations/read", "Microsoft.Compute/locations/operations/read"},
  };
  auto it = kActions.find(action);
  return it == kActions.end() ? action : it->second;
}

absl::Status ArmErrorToStatus(const std::string& what, const ArmError& error,
                              const std::string& action, const std::string& instance_type,
                              const std::string& resource_group) {
  std::string text = absl::StrCat(what, ": HTTP ", error.http_status);
  if (!error.code.empty()) absl::StrAppend(&text, " ", error.code);
  if (!error.message.empty()) absl::StrAppend(&text, ": ", error.message);
  if (IsCapacityCode(error.code, error.message)) return CapacityStatus(text, error, instance_type);
  if (error.code == "ResourceGroupNotFound") {
    return absl::InvalidArgumentError(
        absl::StrCat("resource_group = \"", resource_group, "\": ", text));
  }
  if (error.code == "AuthorizationFailed" || error.code == "LinkedAuthorizationFailed" ||
      error.http_status == 403) {
    return absl::PermissionDeniedError(
        absl::StrCat(text, "; the identity needs ", ActionFor(action)));
  }
  if (error.http_status == 401) return absl::UnauthenticatedError(text);
  if (error.http_status == 404) return absl::NotFoundError(text);
  if (error.http_status == 400) return absl::InvalidArgumentError(text);
  if (error.http_status == 409 || error.http_status == 412) {
    return absl::FailedPreconditionError(text);
  }
  if (error.http_status == 429 || error.http_status >= 500) return absl::UnavailableError(text);
  return absl::FailedPreconditionError(text);
}

bool IsRetryable(const ArmError& error) {
  if (IsCapacityCode(error.code, error.message)) return false;
  return error.http_status == 429 || error.http_status >= 500;
}

bool ValidSegment(absl::string_view text, absl::string_view extra) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || extra.find(c) != extra.npos)) {
      return false;
    }
  }
  return true;
}

std::string Lower(absl::string_view text) { return absl::AsciiStrToLower(text); }

InstanceState StateOf(const std::string& provisioning_state) {
  if (provisioning_state == "Succeeded") return InstanceState::kRunning;
  if (provisioning_state == "Deleting") return InstanceState::kShuttingDown;
  if (provisioning_state == "Failed" || provisioning_state == "Canceled") {
    return InstanceState::kTerminated;
  }
  return InstanceState::kPending;  // Creating, Updating, Migrating
}

// An image as storageProfile.imageReference: a resource id, or PUBLISHER:OFFER:SKU:VERSION.
// `field` names where it was given.
absl::StatusOr<json> ImageReference(const std::string& image, const std::string& field) {
  if (absl::StartsWith(image, "/")) return json{{"id", image}};
  std::vector<std::string> urn = absl::StrSplit(image, ':');
  if (urn.size() != 4 ||
      std::any_of(urn.begin(), urn.end(), [](const std::string& p) { return p.empty(); })) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " = \"", image,
        "\": expected an image resource id (/subscriptions/...) or PUBLISHER:OFFER:SKU:VERSION"));
  }
  return json{{"publisher", urn[0]}, {"offer", urn[1]}, {"sku", urn[2]}, {"version", urn[3]}};
}

// Why `place` cannot be another location's place of a provider in `location` ("" when it can).
std::string BadPlace(const AzurePlace& place, const std::string& location) {
  if (!ValidSegment(place.location, "") || Lower(place.location) != place.location) {
    return "expected a zone of another location (westus2-1) or a location (westus)";
  }
  if (!place.zone.empty() && (!AllDigits(place.zone) || place.zone.size() > 2)) {
    return absl::StrCat("\"", place.zone, "\" is not an availability zone (1, 2, 3)");
  }
  if (place.location == location) {
    return absl::StrCat(location, " is the provider's own location: its zones are zone and zones");
  }
  if (!absl::StartsWith(place.subnet_id, "/subscriptions/") ||
      place.subnet_id.find("/subnets/") == std::string::npos) {
    return absl::StrCat("expected the resource id of a subnet in ", place.location,
                        " (/subscriptions/.../virtualNetworks/V/subnets/S)");
  }
  return "";
}

}  // namespace

std::string AzurePlace::Name() const {
  return zone.empty() ? location : absl::StrCat(location, "-", zone);
}

absl::StatusOr<std::vector<AzurePlace>> ParseAzurePlaces(const std::vector<std::string>& items,
                                                         const std::string& location,
                                                         absl::string_view field) {
  std::vector<AzurePlace> out;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string& item = items[i];
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "] = \"", item, "\": ", why));
    };
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return bad(
          "expected PLACE=SUBNET_ID, PLACE a zone of another location (westus2-1) or a "
          "location (westus)");
    }
    AzurePlace place;
    const std::string name = Lower(absl::StripAsciiWhitespace(item.substr(0, eq)));
    std::vector<std::string> parts = absl::StrSplit(name, absl::MaxSplits('-', 1));
    place.location = parts[0];
    if (parts.size() == 2) place.zone = parts[1].empty() ? "-" : parts[1];
    place.subnet_id = std::string(absl::StripAsciiWhitespace(item.substr(eq + 1)));
    if (std::string why = BadPlace(place, location); !why.empty()) return bad(why);
    for (const AzurePlace& earlier : out) {
      if (earlier.Name() == place.Name()) return bad(absl::StrCat(place.Name(), " is given twice"));
    }
    out.push_back(std::move(place));
  }
  return out;
}

ArmError ParseArmError(long http_status, const std::string& body) {
  ArmError out;
  out.http_status = http_status;
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  const json& error = doc.is_object() && doc.contains("error") ? doc["error"] : doc;
  out.code = Text(error, "code");
  out.message = Text(error, "message");
  // Deployment-style wrappers carry the cause in details[].
  const json& details = Child(error, "details");
  if (details.is_array()) {
    for (const json& d : details) {
      const std::string code = Text(d, "code");
      if (!code.empty() && (out.code.empty() || out.code == "DeploymentFailed" ||
                            IsCapacityCode(code, Text(d, "message")))) {
        out.code = code;
        out.message = Text(d, "message");
        break;
      }
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<AzureProvider>> AzureProvider::Create(Options options) {
  // Subscription ids are GUIDs; resource group names allow letters, digits, '-', '_', '.', '('
  // and ')'; locations are lowercase names like eastus.
  if (!ValidSegment(options.subscription, "-")) {
    return absl::InvalidArgumentError(absl::StrCat("subscription = \"", options.subscription,
                                                   "\": expected a subscription id (a GUID)"));
  }
  if (!ValidSegment(options.resource_group, "-_.()") || options.resource_group.size() > 90) {
    return absl::InvalidArgumentError(
        absl::StrCat("resource_group = \"", options.resource_group,
                     "\": expected 1-90 letters, digits, '-', '_', '.', '(' and ')'"));
  }
  if (!ValidSegment(options.location, "") || Lower(options.location) != options.location) {
    return absl::InvalidArgumentError(absl::StrCat("location = \"", options.location,
                                                   "\": expected a location name such as eastus"));
  }
  std::string endpoint = options.endpoint_url.empty() ? kDefaultEndpoint : options.endpoint_url;
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  if (UrlOrigin(endpoint).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("endpoint_url = \"", options.endpoint_url,
                                                   "\": expected http(s)://HOST[:PORT]"));
  }
  std::string prices = options.prices_url.empty() ? kDefaultPricesUrl : options.prices_url;
  if (UrlOrigin(prices).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("prices_url = \"", options.prices_url,
                                                   "\": expected http(s)://HOST[:PORT]/PATH"));
  }
  if (options.token_source == nullptr) {
    return absl::InvalidArgumentError("token_source is null: Resource Manager calls need a token");
  }
  if (options.max_price != -1 && !(options.max_price > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_price = ", options.max_price, ": must be -1 (up to pay-as-you-go) or > 0 USD/h"));
  }
  // Zones are kept bare ("1"); "LOCATION-1" of this location is accepted too.
  auto bare_zone = [&](const std::string& field, std::string& zone) -> absl::Status {
    absl::string_view bare = zone;
    (void)absl::ConsumePrefix(&bare, options.location + "-");
    if (!AllDigits(bare) || bare.size() > 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " = \"", zone, "\": expected an availability zone of ",
                       options.location, " like 1 (or ", options.location, "-1)"));
    }
    zone = std::string(bare);
    return absl::OkStatus();
  };
  if (!options.zone.empty()) {
    if (absl::Status s = bare_zone("zone", options.zone); !s.ok()) return s;
  }
  for (size_t i = 0; i < options.zones.size(); ++i) {
    if (absl::Status s = bare_zone(absl::StrCat("zones[", i, "]"), options.zones[i]); !s.ok()) {
      return s;
    }
  }
  for (size_t i = 0; i < options.other_places.size(); ++i) {
    const AzurePlace& place = options.other_places[i];
    std::string why = BadPlace(place, options.location);
    for (size_t j = 0; why.empty() && j < i; ++j) {
      if (options.other_places[j].Name() == place.Name()) why = "given twice";
    }
    if (!why.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("other_places[", i, "] = \"", place.Name(),
                                                     "=", place.subnet_id, "\": ", why));
    }
  }
  for (const auto& [location, image] : options.location_images) {
    const bool known = std::any_of(options.other_places.begin(), options.other_places.end(),
                                   [&](const AzurePlace& p) { return p.location == location; });
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("location_images: \"", location, "\" is not a location of other_places"));
    }
    if (absl::StatusOr<json> ref = ImageReference(image, "location_images." + location);
        !ref.ok()) {
      return ref.status();
    }
  }
  if (!ValidSegment(options.admin_username, "-_")) {
    return absl::InvalidArgumentError(absl::StrCat("admin_username = \"", options.admin_username,
                                                   "\": letters, digits, - and _"));
  }
  if (absl::Status s = ValidateCloudRetry(options.retry); !s.ok()) return s;
  return std::unique_ptr<AzureProvider>(
      new AzureProvider(std::move(options), std::move(endpoint), std::move(prices)));
}

AzureProvider::AzureProvider(Options options, std::string endpoint_url, std::string prices_url)
    : options_(std::move(options)),
      retry_(options_.retry),
      endpoint_url_(std::move(endpoint_url)),
      prices_url_(std::move(prices_url)) {}

std::vector<std::string> AzureProvider::ZoneList() const {
  std::vector<std::string> zones;
  if (!options_.zone.empty()) zones.push_back(options_.zone);
  for (const std::string& zone : options_.zones) {
    if (std::find(zones.begin(), zones.end(), zone) == zones.end()) zones.push_back(zone);
  }
  return zones;
}

std::vector<AzurePlace> AzureProvider::Places() const {
  std::vector<AzurePlace> places;
  for (const std::string& zone : ZoneList()) {
    places.push_back(
        {.location = options_.location, .zone = zone, .subnet_id = options_.subnet_id});
  }
  if (places.empty() && !options_.other_places.empty()) {
    places.push_back({.location = options_.location, .subnet_id = options_.subnet_id});
  }
  places.insert(places.end(), options_.other_places.begin(), options_.other_places.end());
  return places;
}

std::string AzureProvider::VmUrl(const std::string& name) const {
  return absl::StrCat(endpoint_url_, "/subscriptions/", options_.subscription, "/resourceGroups/",
                      options_.resource_group, "/providers/Microsoft.Compute/virtualMachines/",
                      name, "?api-version=", options_.compute_api_version);
}

absl::StatusOr<HttpResponse> AzureProvider::Call(const std::string& method, const std::string& url,
                                                 const json* body, const std::string& action,
                                                 const std::string& instance_type) {
  const std::string what = absl::StrCat("Azure ", action);
  HttpRequest request{.method = method, .url = url, .timeout = options_.request_timeout};
  if (body != nullptr) {
    request.headers.emplace_back("Content-Type", "application/json");
    request.body = body->dump();
  }
  BearerTokenSigner bearer(options_.token_source.get());
  return SendWithRetries(
      request, what, retry_, &bearer,
      [&](const HttpResponse& response) -> std::optional<HttpFailure> {
        if (response.status >= 200 && response.status < 300) return std::nullopt;
        ArmError error = ParseArmError(response.status, response.body);
        return HttpFailure{
            .status = ArmErrorToStatus(what, error, action, instance_type, options_.resource_group),
            .retryable = IsRetryable(error)};
      });
}

absl::StatusOr<json> AzureProvider::VirtualMachineResource(const LaunchRequest& request, int index,
                                                           const std::string& name,
                                                           const std::string& ssh_key) const {
  const std::vector<AzurePlace> places = Places();
  const AzurePlace here{.location = options_.location, .subnet_id = options_.subnet_id};
  return ResourceIn(places.empty() ? here : places.front(), request, index, name, ssh_key);
}

absl::StatusOr<json> AzureProvider::ResourceIn(const AzurePlace& place,
                                               const LaunchRequest& request, int index,
                                               const std::string& name,
                                               const std::string& ssh_key) const {
  auto own_image = options_.location_images.find(place.location);
  absl::StatusOr<json> image =
      own_image == options_.location_images.end()
          ? ImageReference(options_.image, "image")
          : ImageReference(own_image->second, "location_images." + place.location);
  if (!image.ok()) return image.status();
  const std::string token =
      request.client_token.empty() ? DefaultClientToken(request) : request.client_token;
  const std::string script = VmStartupScript(request, index, name,
                                             {.cloud = "azure",
                                              .metadata_url = "http://169.254.169.254",
                                              .agent_command = options_.agent_command});
  json os_disk = {{"createOption", "FromImage"},
                  {"deleteOption", "Delete"},
                  {"managedDisk", {{"storageAccountType", "StandardSSD_LRS"}}}};
  if (options_.os_disk_gb > 0) os_disk["diskSizeGB"] = options_.os_disk_gb;
  json vm = {
      {"location", place.location},
      {"tags",
       {{kJobTag, request.job_id},
        {kRoleTag, std::string(RoleName(request.role))},
        {kIndexTag, absl::StrCat(index)},
        {kTypeTag, request.instance_type},
        {kLaunchTag, LaunchNameStem(token).substr(8)}}},
      {"properties",
       {{"hardwareProfile", {{"vmSize", request.instance_type}}},
        {"priority", "Spot"},
        {"evictionPolicy", "Delete"},
        {"billingProfile", {{"maxPrice", options_.max_price}}},
        {"storageProfile", {{"imageReference", *image}, {"osDisk", os_disk}}},
        {"osProfile",
         {{"computerName", name},
          {"adminUsername", options_.admin_username},
          {"customData", absl::Base64Escape(script)},
          {"linuxConfiguration",
           {{"disablePasswordAuthentication", true},
            {"ssh",
             {{"publicKeys", json::array({{{"path", absl::StrCat("/home/", options_.admin_username,
                                                                 "/.ssh/authorized_keys")},
                                           {"keyData", ssh_key}}})}}}}}}},
        {"networkProfile",
         {{"networkApiVersion", "2020-11-01"},
          {"networkInterfaceConfigurations",
           json::array({{{"name", name + "-nic"},
                         {"properties",
                          {{"primary", true},
                           {"deleteOption", "Delete"},
                           {"ipConfigurations",
                            json::array({{{"name", "ipconfig1"},
                                          {"properties",
                                           {{"subnet", {{"id", place.subnet_id}}}}}}})}}}}})}}}}},
  };
  if (request.market == Market::kOnDemand) {
    // Pay-as-you-go: priority Regular, without the spot eviction policy and price cap.
    json& properties = vm["properties"];
    properties["priority"] = "Regular";
    properties.erase("evictionPolicy");
    properties.erase("billingProfile");
  }
  if (!place.zone.empty()) vm["zones"] = json::array({place.zone});
  if (!options_.identity.empty()) {
    vm["identity"] = {{"type", "UserAssigned"},
                      {"userAssignedIdentities", {{options_.identity, json::object()}}}};
  }
  return vm;
}

absl::Status AzureProvider::WaitForCreation(const HttpResponse& put, const std::string& name,
                                            const std::string& instance_type) {
  std::string url = put.Header("azure-asyncoperation");
  // The operation URL gets our token: only when it is on the endpoint we were given.
  if (!url.empty() && UrlOrigin(url) != UrlOrigin(endpoint_url_)) url.clear();
  const absl::Time deadline = options_.now() + options_.operation_timeout;
  json vm = json::parse(put.body, nullptr, /*allow_exceptions=*/false);
  absl::Duration wait = options_.operation_poll;
  for (;;) {
    if (url.empty()) {
      const std::string state = Text(Child(vm, "properties"), "provisioningState");
      if (state == "Succeeded") return absl::OkStatus();
      if (state == "Failed") {
        return absl::UnavailableError(
            absl::StrCat("Azure: VM ", name, " (", instance_type, ") failed to provision"));
      }
    }
    if (options_.now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("Azure: VM ", name, " not created after ",
                       absl::FormatDuration(options_.operation_timeout)));
    }
    if (!url.empty()) {
      absl::StatusOr<HttpResponse> polled =
          Call("GET", url, nullptr, "locations/operations/read", instance_type);
      if (!polled.ok()) return polled.status();
      json op = json::parse(polled->body, nullptr, /*allow_exceptions=*/false);
      const std::string status = Text(op, "status");
      if (status == "Succeeded") return absl::OkStatus();
      if (status == "Failed" || status == "Canceled") {
        ArmError error = ParseArmError(200, polled->body);
        error.http_status = 0;
        std::string text =
            absl::StrCat("Azure: creating VM ", name, " (", instance_type, ") ", Lower(status),
                         ": ", error.code, error.message.empty() ? "" : ": ", error.message);
        if (IsCapacityCode(error.code, error.message)) {
          return CapacityStatus(text, error, instance_type);
        }
        if (error.code == "AuthorizationFailed" || error.code == "LinkedAuthorizationFailed") {
          return absl::PermissionDeniedError(
              absl::StrCat(text, "; the identity needs ", ActionFor("virtualMachines/write")));
        }
        return absl::FailedPreconditionError(text);
      }
      if (const absl::Duration hint = RetryAfter(*polled); hint > absl::ZeroDuration()) {
        wait = std::min(hint, absl::Minutes(1));
      }
    } else {
      absl::StatusOr<HttpResponse> got = Call("GET", VmUrl(name), nullptr, "virtualMachines/read");
      if (!got.ok()) return got.status();
      vm = json::parse(got->body, nullptr, /*allow_exceptions=*/false);
      continue;
    }
    retry_.Sleep(wait);
  }
}

absl::Status AzureProvider::DeleteAndWait(const std::string& name) {
  absl::StatusOr<HttpResponse> removed =
      Call("DELETE", VmUrl(name), nullptr, "virtualMachines/delete");
  if (!removed.ok()) return removed.status();
  const absl::Time deadline = options_.now() + options_.operation_timeout;
  for (;;) {
    absl::StatusOr<HttpResponse> got = Call("GET", VmUrl(name), nullptr, "virtualMachines/read");
    if (absl::IsNotFound(got.status())) return absl::OkStatus();
    if (!got.ok()) return got.status();
    if (options_.now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("Azure: VM ", name, " not deleted after ",
                       absl::FormatDuration(options_.operation_timeout)));
    }
    retry_.Sleep(options_.operation_poll);
  }
}

absl::StatusOr<std::map<std::string, std::string>> AzureProvider::PrivateAddresses() {
  std::map<std::string, std::string> out;
  std::string url = absl::StrCat(
      endpoint_url_, "/subscriptions/", options_.subscription, "/resourceGroups/",
      options_.resource_group,
      "/providers/Microsoft.Network/networkInterfaces?api-version=", options_.network_api_version);
  for (int page = 0; !url.empty(); ++page) {
    if (page >= 1000) return absl::InternalError("Azure networkInterfaces: more than 1000 pages");
    absl::StatusOr<HttpResponse> response = Call("GET", url, nullptr, "networkInterfaces/read");
    if (!response.ok()) return response.status();
    json doc = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    for (const json& nic : Child(doc, "value")) {
      for (const json& config : Child(Child(nic, "properties"), "ipConfigurations")) {
        const std::string ip = Text(Child(config, "properties"), "privateIPAddress");
        if (!ip.empty()) {
          out.emplace(Lower(Text(nic, "id")), ip);
          break;
        }
      }
    }
    url = Text(doc, "nextLink");
    if (!url.empty() && UrlOrigin(url) != UrlOrigin(endpoint_url_)) {
      return absl::InternalError("Azure networkInterfaces: a nextLink to another host");
    }
  }
  return out;
}

Instance AzureProvider::ToInstance(const json& vm,
                                   const std::map<std::string, std::string>& private_ips) const {
  Instance instance;
  instance.id = Text(vm, "name");
  const json& tags = Child(vm, "tags");
  const json& properties = Child(vm, "properties");
  instance.job_id = Text(tags, kJobTag);
  instance.instance_type = Text(tags, kTypeTag);
  if (instance.instance_type.empty()) {
    instance.instance_type = Text(Child(properties, "hardwareProfile"), "vmSize");
  }
  absl::StatusOr<Role> role = ParseRole(Text(tags, kRoleTag));
  if (role.ok()) instance.role = *role;
  (void)absl::SimpleAtoi(Text(tags, kIndexTag), &instance.index);
  instance.state = StateOf(Text(properties, "provisioningState"));
  for (const json& nic : Child(Child(properties, "networkProfile"), "networkInterfaces")) {
    auto it = private_ips.find(Lower(Text(nic, "id")));
    if (it != private_ips.end()) {
      instance.private_address = it->second;
      break;
    }
  }
  absl::Time created;
  std::string error;
  if (absl::ParseTime(absl::RFC3339_full, Text(properties, "timeCreated"), &created, &error)) {
    instance.launch_time = created;
  }
  // The instance metadata service answers only the VM itself: its agent reports.
  instance.metadata_cloud = "azure";
  if (Text(properties, "priority") == "Regular") instance.market = Market::kOnDemand;
  const json& zones = Child(vm, "zones");
  if (zones.is_array() && !zones.empty() && zones[0].is_string()) {
    const std::string location = Text(vm, "location");
    instance.zone = absl::StrCat(location.empty() ? options_.location : Lower(location), "-",
                                 zones[0].get<std::string>());
  } else if (!options_.other_places.empty()) {
    // Where launches go to other locations, a VM without a zone is named by its location.
    const std::string location = Text(vm, "location");
    instance.zone = location.empty() ? options_.location : Lower(location);
  }
  return instance;
}

absl::StatusOr<LaunchResult> AzureProvider::Launch(const LaunchRequest& request) {
  if (absl::Status s = ValidateLaunchRequest(request); !s.ok()) return s;
  if (options_.image.empty()) {
    return absl::InvalidArgumentError(
        "image is empty: give the VM image with your framework and spotdnn-agent (the job "
        "spec's provider.image)");
  }
  if (options_.subnet_id.empty()) {
    return absl::InvalidArgumentError(
        "subnet_id is empty: give the subnet the VMs join (the job spec's provider.subnet_id)");
  }
  if (request.command.empty()) return absl::InvalidArgumentError("command is empty");
  if (!ValidSegment(request.instance_type, "_-")) {
    return absl::InvalidArgumentError(absl::StrCat("instance type \"", request.instance_type,
                                                   "\": expected a VM size like Standard_NC6s_v3"));
  }
  const std::string location = options_.location;
  ZoneSetting setting{.provider = "azure",
                      .key = "provider.zone, provider.zones, provider.other_locations"};
  const std::vector<AzurePlace> places = Places();
  for (const AzurePlace& place : places) setting.configured.push_back(place.Name());
  // Catalogs name Azure zones LOCATION-ZONE; a bare zone number is this location's.
  setting.canonical = [location](const std::string& zone) {
    return AllDigits(zone) ? absl::StrCat(location, "-", zone) : Lower(zone);
  };
  setting.in_region = [location](const std::string& zone) {
    return absl::StartsWith(zone, location + "-");
  };
  absl::StatusOr<std::vector<std::string>> zones_to_try = LaunchZones(request, setting);
  if (!zones_to_try.ok()) return zones_to_try.status();
  const std::vector<std::string>& zones = *zones_to_try;
  const std::string token =
      request.client_token.empty() ? DefaultClientToken(request) : request.client_token;
  const std::string stem = LaunchNameStem(token);
  std::string ssh_key = options_.ssh_public_key;
  if (ssh_key.empty()) {
    // One key per provider: generating an RSA key takes a while, and the same osProfile makes a
    // repeated PUT an update rather than a refused change.
    std::lock_guard<std::mutex> lock(mu_);
    if (ephemeral_key_.empty()) {
      absl::StatusOr<std::string> generated = EphemeralSshPublicKey();
      if (!generated.ok()) return generated.status();
      ephemeral_key_ = *generated;
    }
    ssh_key = ephemeral_key_;
  }

  LaunchResult result;
  result.requested = request.count;
  absl::Status error;
  std::vector<json> made;
  size_t zone_index = 0;  // a zone that refused is not asked again for the later VMs
  for (int i = 0; i < request.count; ++i) {
    const std::string name = absl::StrCat(stem, "-", i);
    const int index = request.first_index + i;
    // A VM of this name is what an earlier try of this launch made: it is not PUT again (its
    // osProfile may not change).
    absl::StatusOr<HttpResponse> existing =
        Call("GET", VmUrl(name), nullptr, "virtualMachines/read");
    if (existing.ok()) {
      json vm = json::parse(existing->body, nullptr, /*allow_exceptions=*/false);
      const std::string state = Text(Child(vm, "properties"), "provisioningState");
      if (state != "Failed") {
        HttpResponse settled = *existing;
        if (state != "Succeeded") {
          if (absl::Status s = WaitForCreation(settled, name, request.instance_type); !s.ok()) {
            error = s;
            break;
          }
        }
        made.push_back(std::move(vm));
        continue;
      }
      // An earlier allocation failure left the VM resource behind: delete it and try again.
      if (absl::Status removed = DeleteAndWait(name); !removed.ok()) {
        error = removed;
        break;
      }
    } else if (!absl::IsNotFound(existing.status())) {
      error = existing.status();
      break;
    }
    bool launched = false;
    absl::Status last_refusal;
    while (!launched && zone_index < zones.size()) {
      const std::string& zone = zones[zone_index];
      AzurePlace place{.location = options_.location, .subnet_id = options_.subnet_id};
      for (const AzurePlace& p : places) {
        if (p.Name() == zone) place = p;
      }
      absl::StatusOr<json> resource = ResourceIn(place, request, index, name, ssh_key);
      if (!resource.ok()) return resource.status();
      absl::StatusOr<HttpResponse> put =
          Call("PUT", VmUrl(name), &*resource, "virtualMachines/write", request.instance_type);
      absl::Status status =
          put.ok() ? WaitForCreation(*put, name, request.instance_type) : put.status();
      if (!status.ok()) {
        // A VM whose allocation failed stays as a failed resource: remove it, so that the name is
        // free for the next zone (and nothing is left behind).
        absl::Status removed = put.ok() ? DeleteAndWait(name) : absl::OkStatus();
        std::optional<std::string> why = ZoneCapacity(status);
        if (why.has_value() && removed.ok()) {
          if (!zone.empty()) result.refused_zones.push_back(RefusedZone(zone, *why));
          last_refusal = status;
          ++zone_index;
          continue;
        }
        error = status;
        break;
      }
      absl::StatusOr<HttpResponse> got = Call("GET", VmUrl(name), nullptr, "virtualMachines/read");
      if (!got.ok()) {
        error = got.status();
        break;
      }
      made.push_back(json::parse(got->body, nullptr, /*allow_exceptions=*/false));
      launched = true;
    }
    if (!error.ok()) break;
    if (!launched) {
      // Regional VMs: the cloud's own answer; zonal: every zone tried, and why each refused.
      error = zones.size() == 1 && zones[0].empty()
                  ? last_refusal
                  : absl::ResourceExhaustedError(absl::StrCat(
                        "Azure: no capacity for ", request.instance_type, " in zones ",
                        absl::StrJoin(zones, ", "), " (", absl::StrJoin(result.refused_zones, "; "),
                        "); re-plan without instance type ", request.instance_type));
      break;
    }
  }
  if (!made.empty()) {
    absl::StatusOr<std::map<std::string, std::string>> ips = PrivateAddresses();
    if (!ips.ok()) return ips.status();
    for (size_t i = 0; i < made.size(); ++i) {
      Instance instance = ToInstance(made[i], *ips);
      instance.job_id = request.job_id;
      instance.role = request.role;
      instance.index = request.first_index + static_cast<int>(i);
      instance.instance_type = request.instance_type;
      result.instances.push_back(std::move(instance));
    }
  }
  if (!error.ok() && result.instances.empty()) return error;
  if (!error.ok() && absl::IsResourceExhausted(error)) {
    error = absl::ResourceExhaustedError(absl::StrCat(
        "launched ", result.instances.size(), " of ", request.count, " ", request.instance_type,
        " Spot VMs for job ", request.job_id, " (partial launch): ", error.message()));
  }
  result.error = error;
  return result;
}

absl::StatusOr<std::vector<Instance>> AzureProvider::Describe(const std::string& job_id) {
  std::vector<json> matching;
  std::string url = absl::StrCat(
      endpoint_url_, "/subscriptions/", options_.subscription, "/resourceGroups/",
      options_.resource_group,
      "/providers/Microsoft.Compute/virtualMachines?api-version=", options_.compute_api_version);
  for (int page = 0; !url.empty(); ++page) {
    if (page >= 1000) return absl::InternalError("Azure virtualMachines: more than 1000 pages");
    absl::StatusOr<HttpResponse> response = Call("GET", url, nullptr, "virtualMachines/read");
    if (!response.ok()) return response.status();
    json doc = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    for (const json& vm : Child(doc, "value")) {
      const json& tags = Child(vm, "tags");
      if (!tags.contains(kJobTag)) continue;
      if (!job_id.empty() && Text(tags, kJobTag) != job_id) continue;
      matching.push_back(vm);
    }
    url = Text(doc, "nextLink");
    if (!url.empty() && UrlOrigin(url) != UrlOrigin(endpoint_url_)) {
      return absl::InternalError("Azure virtualMachines: a nextLink to another host");
    }
  }
  std::vector<Instance> out;
  if (matching.empty()) return out;
  absl::StatusOr<std::map<std::string, std::string>> ips = PrivateAddresses();
  if (!ips.ok()) return ips.status();
  for (const json& vm : matching) out.push_back(ToInstance(vm, *ips));
  return out;
}

absl::Status AzureProvider::Terminate(const std::vector<std::string>& instance_ids) {
  for (size_t i = 0; i < instance_ids.size(); ++i) {
    if (!ValidSegment(instance_ids[i], "-_.")) {
      return absl::InvalidArgumentError(
          absl::StrCat("instance_ids[", i, "] = \"", instance_ids[i], "\": not a VM name"));
    }
  }
  std::vector<std::string> unknown;
  for (const std::string& id : instance_ids) {
    absl::StatusOr<HttpResponse> deleted =
        Call("DELETE", VmUrl(id), nullptr, "virtualMachines/delete");
    // Resource Manager answers 204 No Content to a DELETE of a resource that does not exist.
    if (absl::IsNotFound(deleted.status()) || (deleted.ok() && deleted->status == 204)) {
      unknown.push_back(id);
      continue;
    }
    if (!deleted.ok()) return deleted.status();
  }
  if (unknown.empty()) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("Azure virtualMachines delete: unknown VM(s) ",
                                          absl::StrJoin(unknown, ", "), " in resource group ",
                                          options_.resource_group, "; the others were deleted"));
}

absl::StatusOr<std::vector<SpotPrice>> AzureProvider::SpotPrices(
    const std::vector<std::string>& instance_types, const std::string& region_arg) {
  const std::string region = region_arg.empty() ? options_.location : region_arg;
  if (!ValidSegment(region, "")) {
    return absl::InvalidArgumentError(
        absl::StrCat("region = \"", region, "\": expected a location name such as eastus"));
  }
  std::vector<SpotPrice> out;
  for (const std::string& type : instance_types) {
    if (!ValidSegment(type, "_-")) {
      return absl::InvalidArgumentError(
          absl::StrCat("instance type \"", type, "\": expected a VM size like Standard_NC6s_v3"));
    }
    const std::string filter =
        absl::StrCat("serviceName eq 'Virtual Machines' and armRegionName eq '", region,
                     "' and armSkuName eq '", type, "' and priceType eq 'Consumption'");
    std::string url = absl::StrCat(prices_url_, "?", QueryString({{"$filter", filter}}));
    SpotPrice best{.instance_type = type, .availability_zone = region, .price_per_hour = -1};
    for (int page = 0; !url.empty(); ++page) {
      if (page >= 1000) return absl::InternalError("Azure Retail Prices: more than 1000 pages");
      absl::StatusOr<HttpResponse> response = SendWithRetries(
          {.url = url, .timeout = options_.request_timeout}, "Azure Retail Prices", retry_,
          /*signer=*/nullptr, [&](const HttpResponse& answer) -> std::optional<HttpFailure> {
            if (answer.status == 200) return std::nullopt;
            absl::Status status(
                answer.status == 429 || answer.status >= 500
                    ? absl::StatusCode::kUnavailable
                    : (answer.status == 400 ? absl::StatusCode::kInvalidArgument
                                            : absl::StatusCode::kFailedPrecondition),
                absl::StrCat("Azure Retail Prices ", UrlForMessages(url), ": HTTP ", answer.status,
                             " ", ParseArmError(answer.status, answer.body).message));
            return HttpFailure{.status = status, .retryable = absl::IsUnavailable(status)};
          });
      if (!response.ok()) return response.status();
      json doc = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
      if (!doc.is_object()) {
        return absl::InternalError("Azure Retail Prices: the response is not a JSON object");
      }
      for (const json& item : Child(doc, "Items")) {
        if (Text(item, "armSkuName") != type || Text(item, "armRegionName") != region ||
            Text(item, "type") != "Consumption" || Text(item, "unitOfMeasure") != "1 Hour" ||
            absl::StrContains(Text(item, "productName"), "Windows")) {
          continue;
        }
        const std::string currency = Text(item, "currencyCode");
        if (!currency.empty() && currency != "USD") continue;
        if (!absl::EndsWith(Text(item, "skuName"), " Spot") &&
            !absl::EndsWith(Text(item, "meterName"), " Spot")) {
          continue;
        }
        auto price = item.find("retailPrice");
        if (price == item.end() || !price->is_number() || price->get<double>() < 0) continue;
        absl::Time effective = absl::InfinitePast();
        std::string parse_error;
        (void)absl::ParseTime(absl::RFC3339_full, Text(item, "effectiveStartDate"), &effective,
                              &parse_error);
        if (best.price_per_hour < 0 || effective > best.timestamp) {
          best.price_per_hour = price->get<double>();
          best.timestamp = effective;
        }
      }
      url = Text(doc, "NextPageLink");
      if (!url.empty() && UrlOrigin(url) != UrlOrigin(prices_url_)) {
        return absl::InternalError(absl::StrCat(
            "Azure Retail Prices: NextPageLink points at another host (", UrlOrigin(url), ")"));
      }
    }
    if (best.price_per_hour >= 0) out.push_back(best);
  }
  return out;
}

std::vector<std::string> AzureProvider::ZonesFor(const std::string&) const {
  std::vector<std::string> zones;
  for (const AzurePlace& place : Places()) zones.push_back(place.Name());
  return zones;
}

}  // namespace spotdnn::launcher
