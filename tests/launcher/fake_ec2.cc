#include "tests/launcher/fake_ec2.h"

#include <httplib.h>

#include <chrono>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "libxml/entities.h"
#include "libxml/xmlmemory.h"
#include "provisioner/launcher/sigv4.h"

namespace spotdnn::launcher::testing {
namespace {

constexpr char kNs[] = "http://ec2.amazonaws.com/doc/2016-11-15/";

// Text as XML character data (libxml2's escaping, as a real EC2 endpoint would produce it).
std::string Escape(const std::string& text) {
  xmlChar* encoded = xmlEncodeSpecialChars(nullptr, reinterpret_cast<const xmlChar*>(text.c_str()));
  std::string out = encoded != nullptr ? reinterpret_cast<const char*>(encoded) : "";
  xmlFree(encoded);
  return out;
}

std::map<std::string, std::string> ParseForm(const std::string& body) {
  std::map<std::string, std::string> out;
  for (absl::string_view part : absl::StrSplit(body, '&', absl::SkipEmpty())) {
    size_t eq = part.find('=');
    out[UriDecode(part.substr(0, eq))] =
        eq == absl::string_view::npos ? "" : UriDecode(part.substr(eq + 1));
  }
  return out;
}

// Values of "Prefix.1", "Prefix.2", ... in order.
std::vector<std::string> Numbered(const std::map<std::string, std::string>& params,
                                  const std::string& prefix) {
  std::vector<std::string> out;
  for (int i = 1;; ++i) {
    auto it = params.find(absl::StrCat(prefix, ".", i));
    if (it == params.end()) return out;
    out.push_back(it->second);
  }
}

std::string ErrorXml(const std::string& code, const std::string& message) {
  return absl::StrCat("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>",
                      code, "</Code><Message>", Escape(message), "</Message></Error></Errors>",
                      "<RequestID>fake-request-1</RequestID></Response>");
}

std::string InstanceXml(const FakeEc2::FakeInstance& instance, const std::string& state) {
  std::string tags;
  for (const auto& [key, value] : instance.tags) {
    absl::StrAppend(&tags, "<item><key>", Escape(key), "</key><value>", Escape(value),
                    "</value></item>");
  }
  return absl::StrCat(
      "<item><instanceId>", instance.id, "</instanceId><imageId>",
      Escape(instance.run_params.count("ImageId") ? instance.run_params.at("ImageId") : ""),
      "</imageId><instanceState><code>", state == "running" ? 16 : (state == "pending" ? 0 : 48),
      "</code><name>", state, "</name></instanceState><privateDnsName/>", "<amiLaunchIndex>",
      instance.launch_index, "</amiLaunchIndex><instanceType>", Escape(instance.type),
      "</instanceType><launchTime>2026-11-22T04:00:00.000Z</launchTime>",
      "<privateIpAddress>10.0.0.", 10 + instance.launch_index, "</privateIpAddress>",
      state == "running"
          ? absl::StrCat("<ipAddress>203.0.113.", instance.launch_index + 1, "</ipAddress>")
          : "",
      // EC2 names the lifecycle of spot instances only (on-demand ones have none).
      instance.run_params.count("InstanceMarketOptions.MarketType") > 0
          ? "<instanceLifecycle>spot</instanceLifecycle>"
          : "",
      "<placement><availabilityZone>", instance.zone, "</availabilityZone><tenancy>default",
      "</tenancy></placement><clientToken>",
      Escape(instance.run_params.count("ClientToken") ? instance.run_params.at("ClientToken") : ""),
      "</clientToken><tagSet>", tags, "</tagSet></item>");
}

}  // namespace

FakeEc2::FakeEc2(std::string access_key_id, std::string secret_access_key,
                 std::string session_token)
    : access_key_id_(std::move(access_key_id)),
      secret_access_key_(std::move(secret_access_key)),
      session_token_(std::move(session_token)),
      server_(std::make_unique<httplib::Server>()) {
  server_->Post(".*", [this](const httplib::Request& request, httplib::Response& response) {
    Handle(request, response);
  });
  port_ = server_->bind_to_any_port("127.0.0.1");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // httplib's stop() is lost if it comes before the listen loop runs.
  while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

FakeEc2::~FakeEc2() {
  server_->stop();
  thread_.join();
}

std::string FakeEc2::url() const { return absl::StrCat("http://127.0.0.1:", port_); }

void FakeEc2::Inject(Injected error) {
  std::lock_guard<std::mutex> lock(mu_);
  injected_.push_back(std::move(error));
}

void FakeEc2::SetCapacity(const std::string& type, int count) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_[type] = count;
}

void FakeEc2::SetZoneCapacity(const std::string& zone, const std::string& type, int count) {
  std::lock_guard<std::mutex> lock(mu_);
  zone_capacity_[{zone, type}] = count;
}

void FakeEc2::SetSubnetZone(const std::string& subnet_id, const std::string& zone) {
  std::lock_guard<std::mutex> lock(mu_);
  subnet_zones_[subnet_id] = zone;
}

void FakeEc2::AddSpotPrice(const SpotPrice& price) {
  std::lock_guard<std::mutex> lock(mu_);
  prices_.push_back(price);
}

void FakeEc2::set_page_size(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  page_size_ = n;
}

std::vector<FakeEc2::FakeInstance> FakeEc2::instances() const {
  std::lock_guard<std::mutex> lock(mu_);
  return instances_;
}

std::vector<std::string> FakeEc2::actions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return actions_;
}

std::vector<std::map<std::string, std::string>> FakeEc2::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

std::string FakeEc2::VerifySignature(const httplib::Request& request) {
  std::string authorization = request.get_header_value("Authorization");
  absl::string_view rest = authorization;
  if (!absl::ConsumePrefix(&rest, "AWS4-HMAC-SHA256 ")) return "IncompleteSignature";
  std::map<std::string, std::string> fields;
  for (absl::string_view part : absl::StrSplit(rest, ", ")) {
    size_t eq = part.find('=');
    if (eq == absl::string_view::npos) return "IncompleteSignature";
    fields[std::string(part.substr(0, eq))] = std::string(part.substr(eq + 1));
  }
  std::vector<std::string> scope = absl::StrSplit(fields["Credential"], '/');
  if (scope.size() != 5) return "IncompleteSignature";
  if (scope[0] != access_key_id_) return "AuthFailure";
  if (!session_token_.empty() &&
      request.get_header_value("X-Amz-Security-Token") != session_token_) {
    return "AuthFailure";
  }
  HttpRequestToSign to_sign{.method = request.method, .path = request.path, .body = request.body};
  for (absl::string_view name : absl::StrSplit(fields["SignedHeaders"], ';')) {
    std::string header(name);
    if (header == "x-amz-date" || header == "x-amz-security-token") continue;
    to_sign.headers.emplace_back(header, request.get_header_value(header.c_str()));
  }
  SigningParams params{.region = scope[2], .service = scope[3]};
  std::string error;
  // absl's %Y would swallow the month and day digits: split 20150830T123600Z by hand.
  std::string date = request.get_header_value("X-Amz-Date");
  if (date.size() != 16 ||
      !absl::ParseTime(
          absl::RFC3339_full,
          absl::StrCat(date.substr(0, 4), "-", date.substr(4, 2), "-", date.substr(6, 2), "T",
                       date.substr(9, 2), ":", date.substr(11, 2), ":", date.substr(13, 2), "Z"),
          &params.time, &error)) {
    return "IncompleteSignature";
  }
  AwsCredentials credentials{.access_key_id = access_key_id_,
                             .secret_access_key = secret_access_key_,
                             .session_token = session_token_};
  absl::StatusOr<SignedParts> expected = SignWithHeaders(to_sign, credentials, params);
  if (!expected.ok() || expected->signature != fields["Signature"]) return "SignatureDoesNotMatch";
  return "";
}

void FakeEc2::SetPlacementScore(const std::string& zone, const std::string& type, int score) {
  std::lock_guard<std::mutex> lock(mu_);
  placement_scores_[{zone, type}] = score;
}

void FakeEc2::Handle(const httplib::Request& request, httplib::Response& response) {
  std::map<std::string, std::string> params = ParseForm(request.body);
  const std::string action = params["Action"];
  std::lock_guard<std::mutex> lock(mu_);
  actions_.push_back(action);
  requests_.push_back(params);
  auto reply_error = [&](int status, const std::string& code, const std::string& message) {
    response.status = status;
    response.set_content(ErrorXml(code, message), "text/xml;charset=UTF-8");
  };
  if (std::string bad = VerifySignature(request); !bad.empty()) {
    return reply_error(bad == "AuthFailure" ? 401 : 403, bad,
                       bad == "AuthFailure" ? "AWS was not able to validate the provided access "
                                              "credentials"
                                            : "The request signature we calculated does not "
                                              "match the signature you provided.");
  }
  if (params["Version"] != "2016-11-15") {
    return reply_error(400, "InvalidParameterValue", "unsupported Version");
  }
  std::optional<Injected> after;
  if (!injected_.empty() &&
      (injected_.front().action.empty() || injected_.front().action == action)) {
    Injected error = injected_.front();
    injected_.pop_front();
    if (!error.retry_after.empty()) response.set_header("Retry-After", error.retry_after);
    if (!error.after_effect) return reply_error(error.http_status, error.code, error.message);
    after = error;
  }

  std::string xml;
  if (action == "RunInstances") {
    const std::string token = params["ClientToken"];
    std::vector<std::string> ids;
    const std::string subnet = params["SubnetId"];
    std::string subnet_zone = "us-east-1a";
    if (auto it = subnet_zones_.find(subnet); it != subnet_zones_.end()) subnet_zone = it->second;
    const std::string placement = params["Placement.AvailabilityZone"];
    if (!placement.empty() && !subnet.empty() && placement != subnet_zone) {
      return reply_error(400, "InvalidParameterCombination",
                         "The subnet " + subnet + " is in " + subnet_zone + ", not " + placement);
    }
    const std::string zone = placement.empty() ? subnet_zone : placement;
    if (auto it = tokens_.find(token); !token.empty() && it != tokens_.end()) {
      // EC2 compares the parameters of a repeated token with the first request's.
      for (const FakeInstance& instance : instances_) {
        if (instance.id != it->second.front()) continue;
        for (const char* key :
             {"InstanceType", "MaxCount", "SubnetId", "Placement.AvailabilityZone", "ImageId"}) {
          auto first = instance.run_params.find(key);
          if ((first == instance.run_params.end() ? "" : first->second) != params[key]) {
            return reply_error(400, "IdempotentParameterMismatch",
                               "Arguments on this idempotent request are inconsistent with "
                               "arguments used in previous request(s).");
          }
        }
      }
      ids = it->second;  // idempotent: the same token answers with the same instances
    } else {
      int max_count = 0;
      (void)absl::SimpleAtoi(params["MaxCount"], &max_count);
      int count = max_count;
      const std::string type = params["InstanceType"];
      auto type_cap = capacity_.find(type);
      auto zone_cap = zone_capacity_.find({zone, type});
      if (type_cap != capacity_.end()) count = std::min(count, type_cap->second);
      if (zone_cap != zone_capacity_.end()) count = std::min(count, zone_cap->second);
      if (type_cap != capacity_.end()) type_cap->second -= count;
      if (zone_cap != zone_capacity_.end()) zone_cap->second -= count;
      if (count == 0) {
        return reply_error(500, "InsufficientInstanceCapacity",
                           "We currently do not have sufficient " + type +
                               " capacity in the Availability Zone you requested (" + zone + ").");
      }
      for (int i = 0; i < count; ++i) {
        FakeInstance instance{.id = absl::StrCat("i-0fa4e", 1000 + next_id_++),
                              .type = type,
                              .launch_index = i,
                              .run_params = params,
                              .zone = zone};
        for (int t = 1; params.count(absl::StrCat("TagSpecification.1.Tag.", t, ".Key")); ++t) {
          instance.tags[params[absl::StrCat("TagSpecification.1.Tag.", t, ".Key")]] =
              params[absl::StrCat("TagSpecification.1.Tag.", t, ".Value")];
        }
        ids.push_back(instance.id);
        instances_.push_back(std::move(instance));
      }
      if (!token.empty()) tokens_[token] = ids;
    }
    std::string items;
    for (const FakeInstance& instance : instances_) {
      if (std::find(ids.begin(), ids.end(), instance.id) != ids.end()) {
        absl::StrAppend(&items, InstanceXml(instance, "pending"));
      }
    }
    xml = absl::StrCat("<RunInstancesResponse xmlns=\"", kNs,
                       "\"><requestId>fake-run</requestId><reservationId>r-0001</reservationId>"
                       "<ownerId>123456789012</ownerId><groupSet/><instancesSet>",
                       items, "</instancesSet></RunInstancesResponse>");
  } else if (action == "DescribeInstances") {
    std::vector<const FakeInstance*> matching;
    const std::string filter = params["Filter.1.Name"];
    const std::string value = params["Filter.1.Value.1"];
    const std::vector<std::string> values = Numbered(params, "Filter.1.Value");
    for (const FakeInstance& instance : instances_) {
      if (filter == "client-token") {
        auto token = instance.run_params.find("ClientToken");
        if (token == instance.run_params.end() ||
            std::find(values.begin(), values.end(), token->second) == values.end()) {
          continue;
        }
      } else if (absl::StartsWith(filter, "tag:")) {
        auto it = instance.tags.find(filter.substr(4));
        if (it == instance.tags.end() || it->second != value) continue;
      } else if (filter == "tag-key" && instance.tags.count(value) == 0) {
        continue;
      }
      matching.push_back(&instance);
    }
    int start = 0;
    (void)absl::SimpleAtoi(params["NextToken"], &start);
    int end = std::min<int>(matching.size(), start + page_size_);
    std::string reservations;
    for (int i = start; i < end; ++i) {
      absl::StrAppend(&reservations, "<item><reservationId>r-", i,
                      "</reservationId><ownerId>123456789012</ownerId><groupSet/><instancesSet>",
                      InstanceXml(*matching[i], matching[i]->state), "</instancesSet></item>");
    }
    xml = absl::StrCat("<DescribeInstancesResponse xmlns=\"", kNs,
                       "\"><requestId>fake-describe</requestId><reservationSet>", reservations,
                       "</reservationSet>",
                       end < static_cast<int>(matching.size())
                           ? absl::StrCat("<nextToken>", end, "</nextToken>")
                           : "",
                       "</DescribeInstancesResponse>");
  } else if (action == "TerminateInstances") {
    std::vector<std::string> ids = Numbered(params, "InstanceId");
    for (const std::string& id : ids) {
      bool known = false;
      for (const FakeInstance& instance : instances_) known = known || instance.id == id;
      if (!known) {
        return reply_error(400, "InvalidInstanceID.NotFound",
                           "The instance ID '" + id + "' does not exist");
      }
    }
    std::string items;
    for (FakeInstance& instance : instances_) {
      if (std::find(ids.begin(), ids.end(), instance.id) == ids.end()) continue;
      absl::StrAppend(&items, "<item><instanceId>", instance.id,
                      "</instanceId><currentState><code>32</code><name>shutting-down</name>"
                      "</currentState><previousState><code>16</code><name>",
                      instance.state, "</name></previousState></item>");
      instance.state = "terminated";
    }
    xml = absl::StrCat("<TerminateInstancesResponse xmlns=\"", kNs,
                       "\"><requestId>fake-terminate</requestId><instancesSet>", items,
                       "</instancesSet></TerminateInstancesResponse>");
  } else if (action == "DescribeSpotPriceHistory") {
    std::vector<std::string> types = Numbered(params, "InstanceType");
    std::vector<const SpotPrice*> matching;
    for (const SpotPrice& price : prices_) {
      if (types.empty() ||
          std::find(types.begin(), types.end(), price.instance_type) != types.end()) {
        matching.push_back(&price);
      }
    }
    int start = 0;
    (void)absl::SimpleAtoi(params["NextToken"], &start);
    int end = std::min<int>(matching.size(), start + page_size_);
    std::string items;
    for (int i = start; i < end; ++i) {
      absl::StrAppend(
          &items, "<item><instanceType>", matching[i]->instance_type,
          "</instanceType><productDescription>Linux/UNIX</productDescription><spotPrice>",
          absl::StrFormat("%.6f", matching[i]->price_per_hour), "</spotPrice><timestamp>",
          absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", matching[i]->timestamp, absl::UTCTimeZone()),
          "</timestamp><availabilityZone>", matching[i]->availability_zone,
          "</availabilityZone></item>");
    }
    xml = absl::StrCat("<DescribeSpotPriceHistoryResponse xmlns=\"", kNs,
                       "\"><requestId>fake-prices</requestId><spotPriceHistorySet>", items,
                       "</spotPriceHistorySet><nextToken>",
                       end < static_cast<int>(matching.size()) ? absl::StrCat(end) : "",
                       "</nextToken></DescribeSpotPriceHistoryResponse>");
  } else if (action == "DescribeAvailabilityZones" || action == "GetSpotPlacementScores") {
    std::set<std::string> names;
    for (const auto& [subnet, zone] : subnet_zones_) names.insert(zone);
    for (const auto& [key, score] : placement_scores_) names.insert(key.first);
    std::map<std::string, std::string> ids;  // name -> id, numbered from the last name
    int n = static_cast<int>(names.size());
    for (const std::string& name : names) {
      ids[name] = absl::StrCat(name.substr(0, 2), name.substr(name.find('-') + 1, 1),
                               name.substr(name.size() - 2, 1), "-az", n--);
    }
    if (action == "DescribeAvailabilityZones") {
      std::string items;
      for (const auto& [name, id] : ids) {
        absl::StrAppend(&items, "<item><zoneName>", name, "</zoneName><zoneId>", id,
                        "</zoneId><zoneState>available</zoneState><regionName>",
                        name.substr(0, name.size() - 1), "</regionName></item>");
      }
      xml = absl::StrCat("<DescribeAvailabilityZonesResponse xmlns=\"", kNs,
                         "\"><requestId>fake-zones</requestId><availabilityZoneInfo>", items,
                         "</availabilityZoneInfo></DescribeAvailabilityZonesResponse>");
    } else {
      int capacity = 0;
      const std::string type = params["InstanceType.1"];
      if (type.empty() || !absl::SimpleAtoi(params["TargetCapacity"], &capacity) || capacity < 1 ||
          params["SingleAvailabilityZone"] != "true") {
        return reply_error(400, "InvalidParameterValue",
                           "InstanceType.1, TargetCapacity >= 1 and SingleAvailabilityZone=true "
                           "are expected here");
      }
      std::string items;
      for (const auto& [key, score] : placement_scores_) {
        if (key.second != type) continue;
        const std::string& zone = key.first;
        absl::StrAppend(&items, "<item><region>", zone.substr(0, zone.size() - 1),
                        "</region><availabilityZoneId>", ids[zone], "</availabilityZoneId><score>",
                        score, "</score></item>");
      }
      xml = absl::StrCat("<GetSpotPlacementScoresResponse xmlns=\"", kNs,
                         "\"><requestId>fake-scores</requestId><spotPlacementScoreSet>", items,
                         "</spotPlacementScoreSet></GetSpotPlacementScoresResponse>");
    }
  } else {
    return reply_error(400, "InvalidAction", "The action " + action + " is not valid");
  }
  if (after) return reply_error(after->http_status, after->code, after->message);
  response.status = 200;
  response.set_content(xml, "text/xml;charset=UTF-8");
}

}  // namespace spotdnn::launcher::testing
