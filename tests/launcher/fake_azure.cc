#include "tests/launcher/fake_azure.h"

#include <httplib.h>

#include <chrono>
#include <optional>
#include <regex>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "provisioner/launcher/http.h"

namespace spotdnn::launcher::testing {
namespace {

using nlohmann::json;

json ArmError(const std::string& code, const std::string& message) {
  return {{"error", {{"code", code}, {"message", message}}}};
}

void Reply(httplib::Response& response, int status, const json& body) {
  response.status = status;
  response.set_content(body.dump(), "application/json; charset=utf-8");
}

std::string Str(const json& doc, const char* key) {
  if (!doc.is_object()) return "";
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

const json& At(const json& doc, const char* key) {
  static const json* empty = new json(json::object());
  if (!doc.is_object()) return *empty;
  auto it = doc.find(key);
  return it == doc.end() ? *empty : *it;
}

std::string Base64Decode(const std::string& text) {
  std::string out;
  return absl::Base64Unescape(text, &out) ? out : std::string();
}

// Why a VM body is not what Resource Manager takes for a Spot VM ("" when it is).
std::string InvalidVm(const json& body, const std::string& location,
                      const std::map<std::string, std::string>& other_locations) {
  if (!body.is_object()) return "The request content was invalid and could not be deserialized.";
  const std::string where = Str(body, "location");
  if (where != location && other_locations.count(where) == 0) {
    return "The location '" + where + "' is not this resource group's";
  }
  const json& p = At(body, "properties");
  // Spot VMs (an eviction policy and a price cap) or Regular ones (neither), as Azure takes them.
  const std::string priority = Str(p, "priority");
  if (priority == "Regular") {
    if (p.contains("evictionPolicy") || p.contains("billingProfile")) {
      return "Eviction policy and max price can be set only for Spot VMs (properties.priority).";
    }
  } else if (priority != "Spot") {
    return "Priority '" + priority + "' is not valid (properties.priority).";
  } else {
    const std::string eviction = Str(p, "evictionPolicy");
    if (eviction != "Delete" && eviction != "Deallocate") {
      return "EvictionPolicy '" + eviction + "' is not valid.";
    }
    const json& max_price = At(At(p, "billingProfile"), "maxPrice");
    if (!max_price.is_number() ||
        (max_price.get<double>() != -1 && !(max_price.get<double>() > 0))) {
      return "MaxPriceValueInvalid: the supported values for max price are -1 or decimals > 0.";
    }
  }
  if (Str(At(p, "hardwareProfile"), "vmSize").empty()) return "hardwareProfile.vmSize is missing";
  if (body.contains("zones")) {
    const json& zones = body["zones"];
    if (!zones.is_array() || zones.size() != 1 || !zones[0].is_string() ||
        zones[0].get<std::string>().empty() ||
        zones[0].get<std::string>().find_first_not_of("0123456789") != std::string::npos) {
      return "The zones '" + zones.dump() + "' are not valid: one availability zone such as 1.";
    }
  }
  const json& image = At(At(p, "storageProfile"), "imageReference");
  if (Str(image, "id").empty() && Str(image, "publisher").empty()) {
    return "storageProfile.imageReference is missing";
  }
  const json& os = At(p, "osProfile");
  if (Str(os, "computerName").empty() || Str(os, "adminUsername").empty()) {
    return "osProfile.computerName and adminUsername are required";
  }
  if (Base64Decode(Str(os, "customData")).empty()) return "osProfile.customData is not base64";
  const json& keys = At(At(At(os, "linuxConfiguration"), "ssh"), "publicKeys");
  if (!keys.is_array() || keys.empty() || Str(keys[0], "keyData").rfind("ssh-rsa ", 0) != 0) {
    return "Destination path for SSH public keys and an ssh-rsa key are required "
           "(linuxConfiguration.ssh.publicKeys)";
  }
  const json& network = At(p, "networkProfile");
  const json& configs = At(network, "networkInterfaceConfigurations");
  if (Str(network, "networkApiVersion").empty() || !configs.is_array() || configs.empty()) {
    return "networkProfile needs networkApiVersion and networkInterfaceConfigurations";
  }
  const json& ip = At(At(configs[0], "properties"), "ipConfigurations");
  if (!ip.is_array() || ip.empty() || Str(At(At(ip[0], "properties"), "subnet"), "id").empty()) {
    return "networkInterfaceConfigurations[0] needs an ipConfiguration on a subnet";
  }
  // A virtual network (and its subnets) is in one location: the VM's.
  const std::string subnet = Str(At(At(ip[0], "properties"), "subnet"), "id");
  for (const auto& [other, other_subnet] : other_locations) {
    if ((other == where) != (subnet == other_subnet)) {
      return "InvalidResourceReference: Resource " + subnet +
             " referenced by the VM was not found. Please make sure that the referenced resource "
             "exists, and that both resources are in the same region.";
    }
  }
  return "";
}

}  // namespace

FakeAzure::FakeAzure(Options options)
    : options_(std::move(options)), server_(std::make_unique<httplib::Server>()) {
  auto handler = [this](const httplib::Request& request, httplib::Response& response) {
    Handle(request, response);
  };
  server_->Get(".*", handler);
  server_->Post(".*", handler);
  server_->Put(".*", handler);
  server_->Delete(".*", handler);
  port_ = server_->bind_to_any_port("127.0.0.1");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

FakeAzure::~FakeAzure() {
  server_->stop();
  thread_.join();
}

std::string FakeAzure::url() const { return absl::StrCat("http://127.0.0.1:", port_); }
std::string FakeAzure::prices_url() const { return url() + "/api/retail/prices"; }

void FakeAzure::Inject(Injected error) {
  std::lock_guard<std::mutex> lock(mu_);
  injected_.push_back(std::move(error));
}

void FakeAzure::SetCapacity(const std::string& vm_size, int count, CapacityFailure how) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_[vm_size] = {count, how};
}

void FakeAzure::AddPrice(json item) {
  std::lock_guard<std::mutex> lock(mu_);
  prices_.push_back(std::move(item));
}

void FakeAzure::set_page_size(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  page_size_ = n;
}

void FakeAzure::set_slow_operations(bool slow) {
  std::lock_guard<std::mutex> lock(mu_);
  slow_operations_ = slow;
}

void FakeAzure::ExpireTokens() { tokens_.ExpireAll(); }

std::vector<FakeAzure::Vm> FakeAzure::vms() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Vm> out;
  for (const auto& [name, vm] : vms_) out.push_back(vm);
  return out;
}

void FakeAzure::SetZoneCapacity(const std::string& zone, const std::string& vm_size, int count,
                                CapacityFailure how) {
  std::lock_guard<std::mutex> lock(mu_);
  zone_capacity_[{zone, vm_size}] = {count, how};
}

std::vector<std::string> FakeAzure::put_zones() const {
  std::lock_guard<std::mutex> lock(mu_);
  return put_zones_;
}

std::vector<std::string> FakeAzure::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

bool FakeAzure::Evict(const std::string& name, absl::Duration notice) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (vms_.count(name) == 0) return false;
  }
  host_.Preempt(name, notice, [this, name] { DeleteVm(name); });
  return true;
}

void FakeAzure::DeleteVm(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    vms_.erase(name);
    nics_.erase(name + "-nic");
  }
  host_.Stop(name);
}

void FakeAzure::Handle(const httplib::Request& request, httplib::Response& response) {
  std::optional<Injected> after;
  {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(request.method + " " + request.target);
    if (!injected_.empty()) {
      const Injected& next = injected_.front();
      if ((next.method.empty() || next.method == request.method) &&
          (next.path_contains.empty() ||
           request.target.find(next.path_contains) != std::string::npos)) {
        Injected error = next;
        injected_.pop_front();
        if (!error.after_effect) {
          if (error.retry_after_s > 0) {
            response.set_header("Retry-After", absl::StrCat(error.retry_after_s));
          }
          return Reply(response, error.http_status, ArmError(error.code, error.message));
        }
        after = error;
      }
    }
  }
  std::vector<std::string> seg = absl::StrSplit(request.path, '/');
  if (seg.size() == 5 && seg[2] == "oauth2" && seg[3] == "v2.0" && seg[4] == "token") {
    HandleToken(seg[1], request, response);
  } else if (request.path == "/metadata/identity/oauth2/token") {
    if (request.get_header_value("Metadata") != "true") {
      return Reply(response, 400,
                   {{"error", "invalid_request"},
                    {"error_description", "Required metadata header not specified"}});
    }
    if (request.get_param_value("resource") != "https://management.azure.com/") {
      return Reply(response, 400,
                   {{"error", "invalid_resource"},
                    {"error_description", "AADSTS500011: The resource principal was not found"}});
    }
    const int64_t lifetime = absl::ToInt64Seconds(options_.token_lifetime);
    Reply(response, 200,
          {{"access_token", tokens_.Issue("eyJ0eXAi.mi-", options_.token_lifetime)},
           {"client_id", options_.client_id},
           {"expires_in", absl::StrCat(lifetime)},
           {"expires_on", absl::StrCat(absl::ToUnixSeconds(absl::Now()) + lifetime)},
           {"resource", "https://management.azure.com/"},
           {"token_type", "Bearer"}});
  } else if (absl::StartsWith(request.path, "/subscriptions/")) {
    HandleArm(request, response);
  } else if (request.path == "/api/retail/prices") {
    HandlePrices(request, response);
  } else {
    Reply(response, 404, ArmError("NotFound", "No such path " + request.path));
  }
  if (after) Reply(response, after->http_status, ArmError(after->code, after->message));
}

void FakeAzure::HandleToken(const std::string& tenant, const httplib::Request& request,
                            httplib::Response& response) {
  std::map<std::string, std::string> form = ParseFormBody(request.body);
  auto refuse = [&](int status, const std::string& error, const std::string& description) {
    Reply(response, status,
          {{"error", error},
           {"error_description", description + "\r\nTrace ID: 0000\r\nCorrelation ID: 1111"},
           {"error_codes", json::array({7000215})}});
  };
  if (request.method != "POST") return refuse(405, "invalid_request", "POST only");
  if (tenant != options_.tenant) {
    return refuse(400, "invalid_request", "AADSTS90002: Tenant '" + tenant + "' not found.");
  }
  if (form["grant_type"] != "client_credentials") {
    return refuse(400, "unsupported_grant_type", "AADSTS70003: unsupported grant type");
  }
  if (form["client_id"] != options_.client_id) {
    return refuse(400, "unauthorized_client",
                  "AADSTS700016: Application with identifier '" + form["client_id"] +
                      "' was not found in the directory.");
  }
  if (form["client_secret"] != options_.client_secret) {
    return refuse(401, "invalid_client",
                  "AADSTS7000215: Invalid client secret provided. Ensure the secret being sent "
                  "in the request is the client secret value, not the client secret ID.");
  }
  if (form["scope"] != "https://management.azure.com/.default") {
    return refuse(400, "invalid_scope", "AADSTS70011: The provided scope is not valid.");
  }
  const int64_t lifetime = absl::ToInt64Seconds(options_.token_lifetime);
  Reply(response, 200,
        {{"token_type", "Bearer"},
         {"expires_in", lifetime},
         {"ext_expires_in", lifetime},
         {"access_token", tokens_.Issue("eyJ0eXAi.sp-", options_.token_lifetime)}});
}

void FakeAzure::HandleArm(const httplib::Request& request, httplib::Response& response) {
  const std::string authorization = request.get_header_value("Authorization");
  if (!tokens_.Valid(authorization)) {
    return Reply(
        response, 401,
        ArmError(authorization.empty() ? "AuthenticationFailed" : "ExpiredAuthenticationToken",
                 "The access token expiry UTC time is earlier than current UTC time."));
  }
  const std::string api_version = request.get_param_value("api-version");
  if (api_version.empty()) {
    return Reply(response, 400,
                 ArmError("MissingApiVersionParameter",
                          "The api-version query parameter (?api-version=) is required for all "
                          "requests."));
  }
  std::vector<std::string> seg = absl::StrSplit(request.path, '/');
  if (seg.size() < 3 || seg[2] != options_.subscription) {
    return Reply(
        response, 404,
        ArmError("SubscriptionNotFound",
                 "The subscription '" + (seg.size() > 2 ? seg[2] : "") + "' could not be found."));
  }
  const std::string sub = "/subscriptions/" + options_.subscription;
  const std::string group = sub + "/resourceGroups/" + options_.resource_group;
  std::lock_guard<std::mutex> lock(mu_);
  auto boot = [&](Vm& vm) {
    vm.resource["properties"]["provisioningState"] = "Succeeded";
    host_.Boot(vm.name, Base64Decode(Str(vm.resource["properties"]["osProfile"], "customData")));
  };
  // One more look at a creation: it ends after the first (slow: the second).
  auto advance = [&](json& op) {
    const std::string vm_name = Str(op, "vm");
    if (Str(op, "status") == "InProgress" && op.value("polls", 0) >= (slow_operations_ ? 1 : 0)) {
      auto vm = vms_.find(vm_name);
      if (!Str(op, "fail").empty()) {
        op["status"] = "Failed";
        op["error"] = {{"code", Str(op, "fail")},
                       {"message",
                        "Allocation failed. We do not have sufficient capacity for the "
                        "requested VM size in this region."}};
        if (vm != vms_.end()) vm->second.resource["properties"]["provisioningState"] = "Failed";
      } else {
        op["status"] = "Succeeded";
        if (vm != vms_.end()) boot(vm->second);
      }
    }
    op["polls"] = op.value("polls", 0) + 1;
  };
  // .../providers/Microsoft.Compute/locations/L/operations/ID
  if (seg.size() == 9 && seg[3] == "providers" && seg[5] == "locations" && seg[7] == "operations") {
    auto it = operations_.find(seg[8]);
    if (it == operations_.end()) return Reply(response, 404, ArmError("NotFound", "no operation"));
    json& op = it->second;
    advance(op);
    json out = {{"name", seg[8]}, {"status", op["status"]}, {"startTime", "2026-11-22T04:00:00Z"}};
    if (op.contains("error")) out["error"] = op["error"];
    if (Str(op, "status") == "InProgress") response.set_header("Retry-After", "1");
    return Reply(response, 200, out);
  }
  if (seg.size() < 5 || seg[3] != "resourceGroups" || seg[4] != options_.resource_group) {
    return Reply(
        response, 404,
        ArmError("ResourceGroupNotFound",
                 "Resource group '" + (seg.size() > 4 ? seg[4] : "") + "' could not be found."));
  }
  const bool vms_path = seg.size() >= 8 && seg[5] == "providers" && seg[6] == "Microsoft.Compute" &&
                        seg[7] == "virtualMachines";
  const bool nics_path = seg.size() >= 8 && seg[5] == "providers" &&
                         seg[6] == "Microsoft.Network" && seg[7] == "networkInterfaces";
  auto page = [&](const std::vector<json>& all) {
    int skip = 0;
    (void)absl::SimpleAtoi(request.get_param_value("$skiptoken"), &skip);
    const int end = std::min<int>(all.size(), skip + page_size_);
    json out = {{"value", json::array()}};
    for (int i = skip; i < end; ++i) out["value"].push_back(all[i]);
    if (end < static_cast<int>(all.size())) {
      out["nextLink"] =
          absl::StrCat(url(), request.path, "?api-version=", api_version, "&$skiptoken=", end);
    }
    return out;
  };
  if (nics_path && seg.size() == 8 && request.method == "GET") {
    std::vector<json> all;
    for (const auto& [name, nic] : nics_) all.push_back(nic);
    return Reply(response, 200, page(all));
  }
  if (nics_path && seg.size() == 9 && request.method == "GET") {
    auto it = nics_.find(seg[8]);
    if (it == nics_.end()) return Reply(response, 404, ArmError("NotFound", "no such NIC"));
    return Reply(response, 200, it->second);
  }
  if (vms_path && seg.size() == 8 && request.method == "GET") {
    std::vector<json> all;
    for (const auto& [name, vm] : vms_) all.push_back(vm.resource);
    return Reply(response, 200, page(all));
  }
  if (!vms_path || seg.size() != 9) {
    return Reply(response, 404, ArmError("NotFound", "No such path " + request.path));
  }
  const std::string name = seg[8];
  auto it = vms_.find(name);
  if (request.method == "GET") {
    if (it == vms_.end()) {
      return Reply(response, 404,
                   ArmError("ResourceNotFound", "The Resource 'Microsoft.Compute/virtualMachines/" +
                                                    name + "' under resource group '" +
                                                    options_.resource_group + "' was not found."));
    }
    if (Str(it->second.resource["properties"], "provisioningState") == "Creating") {
      for (auto& [id, op] : operations_) {
        if (Str(op, "vm") == name) advance(op);
      }
    }
    json out = it->second.resource;
    out["properties"]["osProfile"].erase("customData");  // never returned
    return Reply(response, 200, out);
  }
  if (request.method == "DELETE") {
    if (it == vms_.end()) {
      response.status = 204;
      return;
    }
    vms_.erase(it);
    nics_.erase(name + "-nic");
    host_.Stop(name);
    response.status = 202;
    return;
  }
  if (request.method != "PUT") return Reply(response, 405, ArmError("MethodNotAllowed", ""));
  json body = json::parse(request.body, nullptr, false);
  if (std::string why = InvalidVm(body, options_.location, options_.other_locations);
      !why.empty()) {
    return Reply(response, 400, ArmError("InvalidParameter", why));
  }
  if (!std::regex_match(name, std::regex("[A-Za-z0-9][A-Za-z0-9_.-]{0,62}[A-Za-z0-9_]"))) {
    return Reply(response, 400, ArmError("InvalidResourceName", "The VM name is not valid."));
  }
  if (it != vms_.end()) {
    // An update: the osProfile cannot change after creation.
    const json& stored = it->second.resource["properties"]["osProfile"];
    const json& asked = body["properties"]["osProfile"];
    if (stored["customData"] != asked["customData"] ||
        stored["linuxConfiguration"] != asked["linuxConfiguration"]) {
      return Reply(
          response, 409,
          ArmError("PropertyChangeNotAllowed", "Changing property 'osProfile' is not allowed."));
    }
    ++it->second.puts;
    json out = it->second.resource;
    out["properties"]["osProfile"].erase("customData");
    return Reply(response, 200, out);
  }
  const std::string size = Str(body["properties"]["hardwareProfile"], "vmSize");
  const std::string location = Str(body, "location");
  const std::string bare = body.contains("zones") ? body["zones"][0].get<std::string>() : "";
  // The place: a zone of this location bare ("1"), one of another location with its location.
  const std::string zone = location == options_.location ? bare
                           : bare.empty()                ? location
                                                         : location + "-" + bare;
  put_zones_.push_back(zone);
  std::string fail;
  auto take = [&](std::pair<int, CapacityFailure>& cap, const std::string& where) -> bool {
    if (cap.first > 0) {
      --cap.first;
      return true;
    }
    if (cap.second == CapacityFailure::kSkuNotAvailable) {
      Reply(response, 409,
            ArmError("SkuNotAvailable",
                     "The requested VM size for resource 'Following SKUs have failed "
                     "for Capacity Restrictions: " +
                         size + "' is currently not available in location '" + where +
                         "'. Please try another size or deploy to a "
                         "different location or different zone."));
      return false;
    }
    fail = cap.second == CapacityFailure::kZonalAllocationFailed ? "ZonalAllocationFailed"
                                                                 : "AllocationFailed";
    return true;
  };
  if (auto cap = zone_capacity_.find({zone, size}); !zone.empty() && cap != zone_capacity_.end()) {
    if (!take(cap->second, location + "' zone '" + bare)) return;
  }
  // SetCapacity is this location's; another location's limits are its places'.
  if (auto cap = capacity_.find(size);
      fail.empty() && location == options_.location && cap != capacity_.end()) {
    if (!take(cap->second, location)) return;
  }
  const int n = next_id_++;
  const std::string nic_name = name + "-nic";
  const std::string nic_id = group + "/providers/Microsoft.Network/networkInterfaces/" + nic_name;
  json vm = body;
  vm["name"] = name;
  vm["id"] = group + "/providers/Microsoft.Compute/virtualMachines/" + name;
  vm["type"] = "Microsoft.Compute/virtualMachines";
  vm["properties"]["provisioningState"] = "Creating";
  vm["properties"]["vmId"] = absl::StrCat("5c3f1e2a-0000-4000-8000-", 100000000000 + n);
  vm["properties"]["timeCreated"] =
      absl::FormatTime(absl::RFC3339_full, absl::Now(), absl::UTCTimeZone());
  vm["properties"]["networkProfile"]["networkInterfaces"] = json::array(
      {{{"id", nic_id}, {"properties", {{"primary", true}, {"deleteOption", "Delete"}}}}});
  vms_[name] = Vm{.name = name, .resource = vm, .puts = 1};
  nics_[nic_name] = {
      {"name", nic_name},
      {"id", nic_id},
      {"properties",
       {{"ipConfigurations",
         json::array({{{"name", "ipconfig1"},
                       {"properties",
                        {{"privateIPAddress", options_.private_ips_loopback
                                                  ? std::string("127.0.0.1")
                                                  : absl::StrCat("10.1.0.", n % 250 + 4)}}}}})}}}};
  const std::string op_id = absl::StrCat("9f5e", 10000 + n, "-op");
  operations_[op_id] = {{"status", "InProgress"}, {"vm", name}, {"fail", fail}, {"polls", 0}};
  response.set_header("Azure-AsyncOperation",
                      absl::StrCat(url(), sub, "/providers/Microsoft.Compute/locations/", location,
                                   "/operations/", op_id, "?p=fake&api-version=", api_version));
  json out = vm;
  out["properties"]["osProfile"].erase("customData");
  Reply(response, 201, out);
}

void FakeAzure::HandlePrices(const httplib::Request& request, httplib::Response& response) {
  const std::string filter = request.get_param_value("$filter");
  std::smatch m;
  std::string region, sku;
  if (std::regex_search(filter, m, std::regex("armRegionName eq '([^']*)'"))) region = m[1];
  if (std::regex_search(filter, m, std::regex("armSkuName eq '([^']*)'"))) sku = m[1];
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const json*> matching;
  for (const json& item : prices_) {
    if (!region.empty() && Str(item, "armRegionName") != region) continue;
    if (!sku.empty() && Str(item, "armSkuName") != sku) continue;
    matching.push_back(&item);
  }
  int skip = 0;
  (void)absl::SimpleAtoi(request.get_param_value("$skip"), &skip);
  const int end = std::min<int>(matching.size(), skip + page_size_);
  json out = {{"BillingCurrency", "USD"},       {"CustomerEntityId", "Default"},
              {"CustomerEntityType", "Retail"}, {"Items", json::array()},
              {"NextPageLink", nullptr},        {"Count", end - skip}};
  for (int i = skip; i < end; ++i) out["Items"].push_back(*matching[i]);
  if (end < static_cast<int>(matching.size())) {
    out["NextPageLink"] = absl::StrCat(
        prices_url(), "?", QueryString({{"$filter", filter}, {"$skip", absl::StrCat(end)}}));
  }
  Reply(response, 200, out);
}

}  // namespace spotdnn::launcher::testing
