// The EC2 provider: the Query API calls (signed with SigV4), their XML answers and errors, and
// the launch, describe, terminate and spot-price calls over them.
#include "provisioner/launcher/aws_provider.h"

#include <libxml/parser.h>
#include <libxml/tree.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "provisioner/launcher/http_retry.h"
#include "provisioner/launcher/launch_zones.h"

namespace spotdnn::launcher {
namespace {

constexpr char kApiVersion[] = "2016-11-15";
constexpr char kJobTag[] = "spotdnn:job";
constexpr char kRoleTag[] = "spotdnn:role";
constexpr char kFirstIndexTag[] = "spotdnn:first-index";

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { xmlInitParser(); });
}

// --- XML helpers (element names compared without their namespace) ---

struct XmlDocDeleter {
  void operator()(xmlDoc* doc) const { xmlFreeDoc(doc); }
};
using XmlDocPtr = std::unique_ptr<xmlDoc, XmlDocDeleter>;

XmlDocPtr ParseXml(const std::string& text) {
  GlobalInit();
  return XmlDocPtr(xmlReadMemory(text.data(), static_cast<int>(text.size()), "ec2.xml", nullptr,
                                 XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING));
}

bool Named(const xmlNode* node, const char* name) {
  return node != nullptr && node->type == XML_ELEMENT_NODE &&
         xmlStrcmp(node->name, reinterpret_cast<const xmlChar*>(name)) == 0;
}

xmlNode* Child(const xmlNode* node, const char* name) {
  if (node == nullptr) return nullptr;
  for (xmlNode* c = node->children; c != nullptr; c = c->next) {
    if (Named(c, name)) return c;
  }
  return nullptr;
}

std::vector<xmlNode*> Items(const xmlNode* set) {
  std::vector<xmlNode*> out;
  if (set == nullptr) return out;
  for (xmlNode* c = set->children; c != nullptr; c = c->next) {
    if (Named(c, "item")) out.push_back(c);
  }
  return out;
}

std::string Text(const xmlNode* node) {
  if (node == nullptr) return "";
  xmlChar* content = xmlNodeGetContent(node);
  std::string out = content == nullptr ? "" : reinterpret_cast<const char*>(content);
  xmlFree(content);
  return std::string(absl::StripAsciiWhitespace(out));
}

std::string ChildText(const xmlNode* node, const char* name) { return Text(Child(node, name)); }

// The answer to a call of `action` as its <ACTION>Response document; the call's error as it was.
absl::StatusOr<XmlDocPtr> ParseResponse(const std::string& action,
                                        const absl::StatusOr<std::string>& body) {
  if (!body.ok()) return body.status();
  const std::string root_name = action + "Response";
  XmlDocPtr doc = ParseXml(*body);
  xmlNode* root = doc == nullptr ? nullptr : xmlDocGetRootElement(doc.get());
  if (!Named(root, root_name.c_str())) {
    return absl::InternalError(absl::StrCat("EC2 ", action, ": the response is not a ", root_name,
                                            " document (", body->size(), " bytes)"));
  }
  return doc;
}

std::string ShellQuote(const std::string& text) {
  return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "'\\''"}}), "'");
}

absl::Time ParseAwsTime(const std::string& text) {
  absl::Time t;
  std::string error;
  if (absl::ParseTime(absl::RFC3339_full, text, &t, &error)) return t;
  return absl::InfinitePast();
}

Instance ParseInstance(const xmlNode* item) {
  Instance instance;
  instance.id = ChildText(item, "instanceId");
  instance.instance_type = ChildText(item, "instanceType");
  absl::StatusOr<InstanceState> state =
      ParseInstanceState(ChildText(Child(item, "instanceState"), "name"));
  instance.state = state.ok() ? *state : InstanceState::kPending;
  instance.private_address = ChildText(item, "privateIpAddress");
  instance.public_address = ChildText(item, "ipAddress");
  instance.launch_time = ParseAwsTime(ChildText(item, "launchTime"));
  // EC2 names the lifecycle of spot (and scheduled) instances only.
  instance.market =
      ChildText(item, "instanceLifecycle") == "spot" ? Market::kSpot : Market::kOnDemand;
  // The instance's IMDS (169.254.169.254) answers only the instance: its agent reports.
  instance.metadata_cloud = "aws";
  int launch_index = 0;
  (void)absl::SimpleAtoi(ChildText(item, "amiLaunchIndex"), &launch_index);
  int first_index = 0;
  for (const xmlNode* tag : Items(Child(item, "tagSet"))) {
    std::string key = ChildText(tag, "key");
    std::string value = ChildText(tag, "value");
    if (key == kJobTag) instance.job_id = value;
    if (key == kRoleTag) {
      absl::StatusOr<Role> role = ParseRole(value);
      if (role.ok()) instance.role = *role;
    }
    if (key == kFirstIndexTag) (void)absl::SimpleAtoi(value, &first_index);
  }
  instance.index = first_index + launch_index;
  instance.zone = ChildText(Child(item, "placement"), "availabilityZone");
  return instance;
}

struct ParsedUrl {
  std::string scheme;
  std::string authority;  // host[:port], what the Host header carries
  std::string path;       // "/" when absent
};

absl::StatusOr<ParsedUrl> ParseUrl(const std::string& url) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("endpoint_url = \"", url, "\": expected http(s)://HOST[:PORT][/PATH]"));
  }
  ParsedUrl out;
  out.scheme = absl::AsciiStrToLower(url.substr(0, scheme_end));
  if (out.scheme != "http" && out.scheme != "https") {
    return absl::InvalidArgumentError(
        absl::StrCat("endpoint_url = \"", url, "\": the scheme must be http or https"));
  }
  std::string rest = url.substr(scheme_end + 3);
  size_t slash = rest.find('/');
  out.authority = rest.substr(0, slash);
  out.path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (out.authority.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("endpoint_url = \"", url, "\": no host"));
  }
  return out;
}

std::string DefaultEndpoint(const std::string& region) {
  // China regions live in another partition with its own domain.
  if (absl::StartsWith(region, "cn-")) {
    return absl::StrCat("https://ec2.", region, ".amazonaws.com.cn");
  }
  return absl::StrCat("https://ec2.", region, ".amazonaws.com");
}

absl::Status ValidateRegion(const std::string& region) {
  if (region.empty()) return absl::InvalidArgumentError("region is empty");
  for (char c : region) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-')) {
      return absl::InvalidArgumentError(
          absl::StrCat("region = \"", region, "\": expected a name like us-east-1"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Ec2Error> ParseEc2Error(const std::string& xml) {
  XmlDocPtr doc = ParseXml(xml);
  xmlNode* root = doc == nullptr ? nullptr : xmlDocGetRootElement(doc.get());
  // <Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response>
  xmlNode* error = Child(Child(root, "Errors"), "Error");
  if (!Named(root, "Response") || error == nullptr) {
    return absl::NotFoundError("not an EC2 error document");
  }
  return Ec2Error{.code = ChildText(error, "Code"),
                  .message = ChildText(error, "Message"),
                  .request_id = ChildText(root, "RequestID")};
}

namespace {
// Errors that mean "no capacity at this price": re-plan without the type, never retry blindly
// (EC2 sends InsufficientInstanceCapacity as a server error).
bool IsCapacityError(const std::string& code) {
  static const std::set<std::string> kCapacity = {
      "InsufficientInstanceCapacity", "InsufficientCapacity",
      "SpotMaxPriceTooLow",           "MaxSpotInstanceCountExceeded",
      "InstanceLimitExceeded",        "VcpuLimitExceeded",
      "InsufficientHostCapacity",     "InsufficientReservedInstanceCapacity"};
  return kCapacity.count(code) > 0;
}

// The capacity errors that are about one availability zone: another zone may have the type.
// (Spot price, instance and vCPU limits hold for the whole region.)
bool IsZoneCapacityError(const std::string& code) {
  return code == "InsufficientInstanceCapacity" || code == "InsufficientCapacity" ||
         code == "InsufficientHostCapacity";
}

// Marks a status as "this zone has no capacity"; the payload is the EC2 code and message.
constexpr char kZoneCapacityPayload[] = "spotdnn.dev/ec2-zone-capacity";
}  // namespace

std::optional<std::string> Ec2ZoneCapacity(const absl::Status& status) {
  auto payload = status.GetPayload(kZoneCapacityPayload);
  if (!payload.has_value()) return std::nullopt;
  return std::string(*payload);
}

absl::StatusOr<std::vector<AwsZoneSubnet>> ParseAwsSubnets(const std::string& text,
                                                           const std::string& region,
                                                           const std::string& field) {
  std::vector<AwsZoneSubnet> out;
  for (absl::string_view raw : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const std::string item(absl::StripAsciiWhitespace(raw));
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " = \"", text, "\": \"", item, "\": ", why));
    };
    std::vector<std::string> parts = absl::StrSplit(item, '=');
    if (parts.size() != 2) return bad("expected ZONE=SUBNET, e.g. us-east-1a=subnet-0abc1234");
    AwsZoneSubnet zs{.zone = std::string(absl::StripAsciiWhitespace(parts[0])),
                     .subnet_id = std::string(absl::StripAsciiWhitespace(parts[1]))};
    // A zone of the region: the region and a letter (us-east-1a), or a Local Zone
    // (us-west-2-lax-1a).
    const bool zone_ok =
        absl::StartsWith(zs.zone, region) && zs.zone.size() > region.size() &&
        (absl::ascii_islower(zs.zone[region.size()]) || zs.zone[region.size()] == '-') &&
        std::all_of(zs.zone.begin(), zs.zone.end(), [](char c) {
          return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-';
        });
    if (!zone_ok) {
      return bad(absl::StrCat("the zone \"", zs.zone, "\" is not an availability zone of region ",
                              region, " (e.g. ", region, "a)"));
    }
    absl::string_view hex = zs.subnet_id;
    if (!absl::ConsumePrefix(&hex, "subnet-") || hex.empty() ||
        !std::all_of(hex.begin(), hex.end(), [](char c) { return absl::ascii_isxdigit(c); })) {
      return bad(absl::StrCat("the subnet \"", zs.subnet_id,
                              "\" is not a subnet id (subnet-HEX, e.g. subnet-0abc1234)"));
    }
    for (const AwsZoneSubnet& seen : out) {
      if (seen.zone == zs.zone) return bad(absl::StrCat("the zone ", zs.zone, " is given twice"));
    }
    out.push_back(std::move(zs));
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " = \"", text, "\": expected ZONE=SUBNET,... (e.g. ", region, "a=subnet-0abc1234)"));
  }
  return out;
}

std::string ZoneClientToken(const std::string& token, const std::string& zone) {
  return zone.empty() ? token : ClientTokenFor(absl::StrCat(token, "@", zone));
}

bool IsRetryableEc2Error(long http_status, const std::string& code) {
  static const std::set<std::string> kRetryable = {
      "RequestLimitExceeded", "Throttling",  "ThrottlingException", "InternalError",
      "InternalFailure",      "Unavailable", "ServiceUnavailable",  "RequestTimeout"};
  if (IsCapacityError(code)) return false;
  return http_status >= 500 || kRetryable.count(code) > 0;
}

absl::Status Ec2ErrorToStatus(const std::string& action, long http_status, const Ec2Error& error,
                              const std::string& instance_type) {
  static const std::set<std::string> kAuthentication = {"AuthFailure",
                                                        "InvalidClientTokenId",
                                                        "SignatureDoesNotMatch",
                                                        "IncompleteSignature",
                                                        "MissingAuthenticationToken",
                                                        "ExpiredToken",
                                                        "RequestExpired",
                                                        "OptInRequired",
                                                        "Blocked"};
  std::string what = absl::StrCat("EC2 ", action, ": ", error.code.empty() ? "HTTP " : "",
                                  error.code.empty() ? absl::StrCat(http_status) : error.code,
                                  error.message.empty() ? "" : ": ", error.message,
                                  error.request_id.empty() ? "" : " (request id ", error.request_id,
                                  error.request_id.empty() ? "" : ")");
  const std::string& code = error.code;
  if (IsCapacityError(code)) {
    absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
        what, instance_type.empty() ? "" : "; re-plan without instance type " + instance_type));
    if (IsZoneCapacityError(code)) {
      status.SetPayload(
          kZoneCapacityPayload,
          absl::Cord(absl::StrCat(code, error.message.empty() ? "" : ": ", error.message)));
    }
    return status;
  }
  if (code == "UnauthorizedOperation" || code == "AccessDenied" ||
      code == "AccessDeniedException") {
    return absl::PermissionDeniedError(absl::StrCat(what, "; the IAM policy needs ec2:", action,
                                                    action == "RunInstances"
                                                        ? " (and ec2:CreateTags for the job tags, "
                                                          "iam:PassRole with an instance profile)"
                                                        : ""));
  }
  if (kAuthentication.count(code) > 0) {
    return absl::UnauthenticatedError(
        absl::StrCat(what, "; check the access key, its secret, the session token and the clock"));
  }
  if (code == "RequestLimitExceeded" || code == "Throttling" || code == "ThrottlingException") {
    return absl::UnavailableError(what);
  }
  if (absl::StartsWith(code, "InvalidInstanceID.NotFound")) return absl::NotFoundError(what);
  if (code == "IdempotentParameterMismatch") {
    return absl::FailedPreconditionError(
        absl::StrCat(what, "; the client token was used before with other parameters"));
  }
  if (absl::StartsWith(code, "Invalid") || absl::StartsWith(code, "Missing") ||
      absl::StartsWith(code, "Unknown") || code == "Unsupported" ||
      code == "UnsupportedOperation" || code == "ValidationError") {
    return absl::InvalidArgumentError(what);
  }
  if (http_status >= 500) return absl::UnavailableError(what);
  if (http_status == 401) return absl::UnauthenticatedError(what);
  if (http_status == 403) return absl::PermissionDeniedError(what);
  return absl::FailedPreconditionError(what);
}

absl::StatusOr<std::unique_ptr<AwsProvider>> AwsProvider::Create(Options options) {
  if (absl::Status s = ValidateRegion(options.region); !s.ok()) return s;
  std::string endpoint =
      options.endpoint_url.empty() ? DefaultEndpoint(options.region) : options.endpoint_url;
  if (absl::StatusOr<ParsedUrl> url = ParseUrl(endpoint); !url.ok()) return url.status();
  if (absl::Status s = ValidateCloudRetry(options.retry); !s.ok()) return s;
  if (!options.subnets.empty() && !options.subnet_id.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("subnet_id = \"", options.subnet_id,
                     "\" and subnets: give one (subnets: a subnet per zone, tried in order)"));
  }
  std::vector<std::string> items;
  for (const AwsZoneSubnet& zs : options.subnets) {
    items.push_back(absl::StrCat(zs.zone, "=", zs.subnet_id));
  }
  if (!items.empty()) {
    absl::StatusOr<std::vector<AwsZoneSubnet>> parsed =
        ParseAwsSubnets(absl::StrJoin(items, ","), options.region, "subnets");
    if (!parsed.ok()) return parsed.status();
  }
  return std::unique_ptr<AwsProvider>(new AwsProvider(std::move(options), endpoint));
}

AwsProvider::AwsProvider(Options options, std::string endpoint_url)
    : options_(std::move(options)),
      retry_(options_.retry),
      endpoint_url_(std::move(endpoint_url)) {}

absl::StatusOr<std::string> AwsProvider::Call(
    const std::string& action, std::vector<std::pair<std::string, std::string>> params,
    const std::string& region, const std::string& instance_type) {
  const std::string& signing_region = region.empty() ? options_.region : region;
  if (absl::Status s = ValidateRegion(signing_region); !s.ok()) return s;
  std::string endpoint = endpoint_url_;
  if (options_.endpoint_url.empty() && signing_region != options_.region) {
    endpoint = DefaultEndpoint(signing_region);
  }
  absl::StatusOr<ParsedUrl> url = ParseUrl(endpoint);
  if (!url.ok()) return url.status();

  params.insert(params.begin(), {{"Action", action}, {"Version", kApiVersion}});

  SigV4Signer signer(options_.credentials, {.region = signing_region, .service = "ec2"},
                     options_.now);
  absl::StatusOr<HttpResponse> response = SendWithRetries(
      {.method = "POST",
       .url = endpoint,
       .headers = {{"Host", url->authority},
                   {"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"}},
       .body = FormEncode(params),
       .timeout = options_.request_timeout},
      absl::StrCat("EC2 ", action), retry_, &signer,
      // EC2's retry traits: throttling and 5xx are transient, capacity errors are not.
      [&](const HttpResponse& answer) -> std::optional<HttpFailure> {
        if (answer.status == 200) return std::nullopt;
        absl::StatusOr<Ec2Error> error = ParseEc2Error(answer.body);
        const Ec2Error ec2_error = error.ok() ? *error : Ec2Error{};
        return HttpFailure{
            .status = Ec2ErrorToStatus(action, answer.status, ec2_error, instance_type),
            .retryable = IsRetryableEc2Error(answer.status, ec2_error.code)};
      });
  if (!response.ok()) return response.status();
  return std::move(response->body);
}

std::string AwsProvider::UserData(const LaunchRequest& request) const {
  std::string script = absl::StrCat(
      "#!/bin/bash\n# spotdnn launcher: job ", request.job_id, ", ", RoleName(request.role),
      " instances of ", request.instance_type, "\n",
      "IMDS=http://169.254.169.254\n"
      "TOKEN=$(curl -s -X PUT $IMDS/latest/api/token -H "
      "'X-aws-ec2-metadata-token-ttl-seconds: 21600')\n"
      "md() { curl -s -H \"X-aws-ec2-metadata-token: $TOKEN\" \"$IMDS/latest/meta-data/$1\"; }\n"
      "INSTANCE_ID=$(md instance-id)\n"
      "LAUNCH_INDEX=$(md ami-launch-index)\n");
  for (const auto& [name, value] : InstanceEnvironment(request, -1, "", "")) {
    absl::StrAppend(&script, "export ", name, "=", ShellQuote(value), "\n");
  }
  absl::StrAppend(&script, "export SPOTDNN_INDEX=$((", request.first_index, " + LAUNCH_INDEX))\n",
                  "export SPOTDNN_INSTANCE_ID=\"$INSTANCE_ID\"\n",
                  "export SPOTDNN_METADATA_ENDPOINT=$IMDS\n");
  // The command runs under spotdnn-agent, the instance wrapper: it reports this instance's
  // notices to the detector, hands them to the command, and streams its samples to the profiler.
  std::string wrapper;
  if (!options_.agent_command.empty()) {
    wrapper = absl::StrCat(
        absl::StrReplaceAll(options_.agent_command,
                            {{"%INSTANCE_ID%", "\"$INSTANCE_ID\""}, {"%JOB_ID%", request.job_id}}),
        " -- ");
  }
  absl::StrAppend(&script, "exec ", wrapper, "/bin/bash -c ", ShellQuote(request.command),
                  " >/var/log/spotdnn-", RoleName(request.role), ".log 2>&1\n");
  return script;
}

absl::StatusOr<LaunchResult> AwsProvider::Launch(const LaunchRequest& request) {
  if (absl::Status s = ValidateLaunchRequest(request); !s.ok()) return s;
  if (options_.image_id.empty()) {
    return absl::InvalidArgumentError(
        "image_id is empty: give the AMI with your framework and spotdnn-agent (the job spec's "
        "provider.image_id)");
  }
  if (request.command.empty()) return absl::InvalidArgumentError("command is empty");
  ZoneSetting setting{.provider = "aws", .key = "provider.subnets (ZONE=SUBNET,...)"};
  for (const AwsZoneSubnet& zs : options_.subnets) setting.configured.push_back(zs.zone);
  setting.in_region = [region = options_.region](const std::string& zone) {
    return absl::StartsWith(zone, region) && zone.size() > region.size() &&
           !absl::ascii_isdigit(zone[region.size()]);
  };
  absl::StatusOr<std::vector<std::string>> zones = LaunchZones(request, setting);
  if (!zones.ok()) return zones.status();
  if (!options_.subnets.empty()) return LaunchInZones(request, *zones);

  const std::string token =
      request.client_token.empty() ? DefaultClientToken(request) : request.client_token;
  absl::StatusOr<LaunchResult> result = RunInstances(request, "", token);
  if (!result.ok()) return result.status();
  if (static_cast<int>(result->instances.size()) < request.count) {
    result->error = absl::ResourceExhaustedError(absl::StrCat(
        "EC2 RunInstances: launched ", result->instances.size(), " of ", request.count, " ",
        request.instance_type, " ", MarketName(request.market), " instances for job ",
        request.job_id, " (partial launch; re-plan the rest without this type)"));
  }
  return result;
}

absl::StatusOr<LaunchResult> AwsProvider::LaunchInZones(const LaunchRequest& request,
                                                        const std::vector<std::string>& zones) {
  const std::string token =
      request.client_token.empty() ? DefaultClientToken(request) : request.client_token;
  // What earlier tries of this launch made, in any configured zone: a zone whose token launched
  // is not asked again (the same token with another count would be IdempotentParameterMismatch).
  std::map<std::string, std::string> zone_of_token;
  std::vector<std::pair<std::string, std::string>> filter = {{"Filter.1.Name", "client-token"}};
  for (const AwsZoneSubnet& zs : options_.subnets) {
    const std::string zone_token = ZoneClientToken(token, zs.zone);
    zone_of_token[zone_token] = zs.zone;
    filter.emplace_back(absl::StrCat("Filter.1.Value.", zone_of_token.size()), zone_token);
  }
  std::vector<std::string> tokens;
  absl::StatusOr<std::vector<Instance>> existing = DescribeMatching(filter, &tokens);
  if (!existing.ok()) return existing.status();

  LaunchResult result;
  result.requested = request.count;
  std::set<std::string> spent;
  for (size_t i = 0; i < existing->size(); ++i) {
    spent.insert(zone_of_token[tokens[i]]);
    result.instances.push_back(std::move((*existing)[i]));
  }
  std::sort(result.instances.begin(), result.instances.end(),
            [](const Instance& a, const Instance& b) { return a.index < b.index; });

  absl::Status error;
  int remaining = request.count - static_cast<int>(result.instances.size());
  for (const std::string& zone : zones) {
    if (remaining <= 0) break;
    if (spent.count(zone) > 0) continue;
    LaunchRequest part = request;
    part.count = remaining;
    part.first_index = request.first_index + (request.count - remaining);
    absl::StatusOr<LaunchResult> got = RunInstances(part, zone, ZoneClientToken(token, zone));
    if (!got.ok()) {
      if (std::optional<std::string> why = Ec2ZoneCapacity(got.status()); why.has_value()) {
        result.refused_zones.push_back(RefusedZone(zone, *why));
        continue;
      }
      error = got.status();
      break;
    }
    const int launched = static_cast<int>(got->instances.size());
    if (launched < remaining) {
      result.refused_zones.push_back(
          RefusedZone(zone, absl::StrCat("launched ", launched, " of ", remaining)));
    }
    for (Instance& instance : got->instances) {
      if (instance.zone.empty()) instance.zone = zone;
      result.instances.push_back(std::move(instance));
    }
    remaining -= launched;
  }
  if (remaining > 0 && error.ok()) {
    error = absl::ResourceExhaustedError(
        absl::StrCat("EC2 RunInstances: no capacity for ", request.instance_type, " in zones ",
                     absl::StrJoin(zones, ", "), " (", absl::StrJoin(result.refused_zones, "; "),
                     "): launched ", result.instances.size(), " of ", request.count, " ",
                     MarketName(request.market), " instances for job ", request.job_id,
                     "; re-plan without instance type ", request.instance_type));
  }
  if (!error.ok() && result.instances.empty()) return error;
  result.error = error;
  return result;
}

absl::StatusOr<LaunchResult> AwsProvider::RunInstances(const LaunchRequest& request,
                                                       const std::string& zone,
                                                       const std::string& token) {
  std::vector<std::pair<std::string, std::string>> p = {
      {"ImageId", options_.image_id},
      {"InstanceType", request.instance_type},
      // MinCount 1: EC2 launches what it can, and a shortfall is reported as a partial launch.
      {"MinCount", "1"},
      {"MaxCount", absl::StrCat(request.count)},
      {"ClientToken", token},
      {"MetadataOptions.HttpTokens", "required"},
      {"UserData", absl::Base64Escape(UserData(request))},
      {"TagSpecification.1.ResourceType", "instance"},
      {"TagSpecification.1.Tag.1.Key", kJobTag},
      {"TagSpecification.1.Tag.1.Value", request.job_id},
      {"TagSpecification.1.Tag.2.Key", kRoleTag},
      {"TagSpecification.1.Tag.2.Value", std::string(RoleName(request.role))},
      {"TagSpecification.1.Tag.3.Key", kFirstIndexTag},
      {"TagSpecification.1.Tag.3.Value", absl::StrCat(request.first_index)},
      {"TagSpecification.1.Tag.4.Key", "Name"},
      {"TagSpecification.1.Tag.4.Value",
       absl::StrCat("spotdnn-", request.job_id, "-", RoleName(request.role))},
  };
  // On-demand: RunInstances without the market options (the list price; never interrupted).
  if (request.market == Market::kSpot) {
    p.emplace_back("InstanceMarketOptions.MarketType", "spot");
    p.emplace_back("InstanceMarketOptions.SpotOptions.SpotInstanceType", "one-time");
    p.emplace_back("InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior", "terminate");
    if (!options_.max_spot_price.empty()) {
      p.emplace_back("InstanceMarketOptions.SpotOptions.MaxPrice", options_.max_spot_price);
    }
  }
  std::string subnet = options_.subnet_id;
  for (const AwsZoneSubnet& zs : options_.subnets) {
    if (zs.zone == zone) subnet = zs.subnet_id;
  }
  if (!subnet.empty()) p.emplace_back("SubnetId", subnet);
  // The subnet decides the zone; naming it too makes a mismatched subnet an error, not a launch
  // elsewhere.
  if (!zone.empty()) p.emplace_back("Placement.AvailabilityZone", zone);
  for (size_t i = 0; i < options_.security_group_ids.size(); ++i) {
    p.emplace_back(absl::StrCat("SecurityGroupId.", i + 1), options_.security_group_ids[i]);
  }
  if (!options_.key_name.empty()) p.emplace_back("KeyName", options_.key_name);
  if (!options_.iam_instance_profile.empty()) {
    bool arn = absl::StartsWith(options_.iam_instance_profile, "arn:");
    p.emplace_back(arn ? "IamInstanceProfile.Arn" : "IamInstanceProfile.Name",
                   options_.iam_instance_profile);
  }

  absl::StatusOr<XmlDocPtr> doc =
      ParseResponse("RunInstances", Call("RunInstances", p, "", request.instance_type));
  if (!doc.ok()) return doc.status();
  LaunchResult result;
  result.requested = request.count;
  xmlNode* root = xmlDocGetRootElement(doc->get());
  for (const xmlNode* item : Items(Child(root, "instancesSet"))) {
    Instance instance = ParseInstance(item);
    // RunInstances may answer before the tags show; the request says what they are.
    instance.job_id = request.job_id;
    instance.role = request.role;
    result.instances.push_back(std::move(instance));
  }
  return result;
}

absl::StatusOr<std::vector<Instance>> AwsProvider::Describe(const std::string& job_id) {
  if (!job_id.empty()) {
    return DescribeMatching(
        {{"Filter.1.Name", absl::StrCat("tag:", kJobTag)}, {"Filter.1.Value.1", job_id}});
  }
  return DescribeMatching({{"Filter.1.Name", "tag-key"}, {"Filter.1.Value.1", kJobTag}});
}

absl::StatusOr<std::vector<Instance>> AwsProvider::DescribeMatching(
    const std::vector<std::pair<std::string, std::string>>& filter,
    std::vector<std::string>* client_tokens) {
  std::vector<Instance> out;
  std::string next_token;
  for (int page = 0; page < 1000; ++page) {
    std::vector<std::pair<std::string, std::string>> p = filter;
    if (!next_token.empty()) p.emplace_back("NextToken", next_token);
    absl::StatusOr<XmlDocPtr> doc =
        ParseResponse("DescribeInstances", Call("DescribeInstances", p, ""));
    if (!doc.ok()) return doc.status();
    xmlNode* root = xmlDocGetRootElement(doc->get());
    for (const xmlNode* reservation : Items(Child(root, "reservationSet"))) {
      for (const xmlNode* item : Items(Child(reservation, "instancesSet"))) {
        out.push_back(ParseInstance(item));
        if (client_tokens != nullptr) client_tokens->push_back(ChildText(item, "clientToken"));
      }
    }
    next_token = ChildText(root, "nextToken");
    if (next_token.empty()) return out;
  }
  return absl::InternalError("EC2 DescribeInstances: more than 1000 pages");
}

absl::Status AwsProvider::Terminate(const std::vector<std::string>& instance_ids) {
  if (instance_ids.empty()) return absl::OkStatus();
  for (size_t i = 0; i < instance_ids.size(); ++i) {
    if (instance_ids[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("instance_ids[", i, "] is empty"));
    }
  }
  absl::Status all = TerminateBatch(instance_ids);
  if (!absl::IsNotFound(all) || instance_ids.size() == 1) return all;
  // EC2 refuses the whole call when one id is unknown (an instance it forgot an hour after it
  // ended): terminate the others one by one so that none is left running and billing, then name
  // the unknown ones.
  std::vector<std::string> unknown;
  for (const std::string& id : instance_ids) {
    absl::Status one = TerminateBatch({id});
    if (absl::IsNotFound(one)) {
      unknown.push_back(id);
    } else if (!one.ok()) {
      return one;
    }
  }
  if (unknown.empty()) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("EC2 TerminateInstances: unknown instance id(s) ",
                                          absl::StrJoin(unknown, ", "),
                                          "; the others were terminated"));
}

absl::Status AwsProvider::TerminateBatch(const std::vector<std::string>& instance_ids) {
  std::vector<std::pair<std::string, std::string>> p;
  for (size_t i = 0; i < instance_ids.size(); ++i) {
    p.emplace_back(absl::StrCat("InstanceId.", i + 1), instance_ids[i]);
  }
  absl::StatusOr<XmlDocPtr> doc =
      ParseResponse("TerminateInstances", Call("TerminateInstances", p, ""));
  if (!doc.ok()) return doc.status();
  std::set<std::string> answered;
  for (const xmlNode* item : Items(Child(xmlDocGetRootElement(doc->get()), "instancesSet"))) {
    answered.insert(ChildText(item, "instanceId"));
  }
  std::vector<std::string> missing;
  for (const std::string& id : instance_ids) {
    if (answered.count(id) == 0) missing.push_back(id);
  }
  if (!missing.empty()) {
    return absl::InternalError(
        absl::StrCat("EC2 TerminateInstances did not confirm ", absl::StrJoin(missing, ", ")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SpotPrice>> AwsProvider::SpotPrices(
    const std::vector<std::string>& instance_types, const std::string& region) {
  if (instance_types.empty()) return std::vector<SpotPrice>{};
  // The latest price per (type, zone): start now, so each zone answers with its current price.
  std::map<std::pair<std::string, std::string>, SpotPrice> latest;
  std::string next_token;
  std::string start = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", options_.now(), absl::UTCTimeZone());
  for (int page = 0; page < 1000; ++page) {
    std::vector<std::pair<std::string, std::string>> p;
    for (size_t i = 0; i < instance_types.size(); ++i) {
      p.emplace_back(absl::StrCat("InstanceType.", i + 1), instance_types[i]);
    }
    p.emplace_back("ProductDescription.1", "Linux/UNIX");
    p.emplace_back("StartTime", start);
    p.emplace_back("MaxResults", "1000");
    if (!next_token.empty()) p.emplace_back("NextToken", next_token);
    absl::StatusOr<XmlDocPtr> doc =
        ParseResponse("DescribeSpotPriceHistory", Call("DescribeSpotPriceHistory", p, region));
    if (!doc.ok()) return doc.status();
    xmlNode* root = xmlDocGetRootElement(doc->get());
    for (const xmlNode* item : Items(Child(root, "spotPriceHistorySet"))) {
      SpotPrice price;
      price.instance_type = ChildText(item, "instanceType");
      price.availability_zone = ChildText(item, "availabilityZone");
      price.timestamp = ParseAwsTime(ChildText(item, "timestamp"));
      std::string text = ChildText(item, "spotPrice");
      if (!absl::SimpleAtod(text, &price.price_per_hour) || price.price_per_hour < 0) {
        return absl::InternalError(absl::StrCat("EC2 DescribeSpotPriceHistory: spotPrice = \"",
                                                text, "\" for ", price.instance_type));
      }
      auto key = std::make_pair(price.instance_type, price.availability_zone);
      auto it = latest.find(key);
      if (it == latest.end() || price.timestamp > it->second.timestamp) latest[key] = price;
    }
    next_token = ChildText(root, "nextToken");
    if (next_token.empty()) break;
  }
  std::vector<SpotPrice> out;
  for (auto& [key, price] : latest) out.push_back(std::move(price));
  return out;
}

absl::StatusOr<std::map<std::string, int>> AwsProvider::SpotPlacementScores(
    const std::string& instance_type, int count) {
  if (!options_.placement_scores || options_.subnets.size() < 2) {
    return std::map<std::string, int>{};
  }
  if (count < 1) {
    return absl::InvalidArgumentError(absl::StrCat("count = ", count, ": expected at least 1"));
  }
  const absl::Time now = options_.now();
  const auto key = std::make_pair(instance_type, count);
  if (auto it = scores_.find(key);
      it != scores_.end() && now - it->second.at < options_.placement_scores_ttl) {
    if (!it->second.error.ok()) return it->second.error;  // a refusal is not asked again at once
    return it->second.by_zone;
  }
  absl::StatusOr<std::map<std::string, int>> asked = AskPlacementScores(instance_type, count);
  scores_[key] = Scores{.at = now,
                        .by_zone = asked.ok() ? *asked : std::map<std::string, int>{},
                        .error = asked.status()};
  return asked;
}

absl::StatusOr<std::map<std::string, int>> AwsProvider::AskPlacementScores(
    const std::string& instance_type, int count) {
  // Scores name zones by id, which maps to a different name in each account.
  if (zone_names_.empty()) {
    absl::StatusOr<XmlDocPtr> doc = ParseResponse(
        "DescribeAvailabilityZones", Call("DescribeAvailabilityZones", {}, options_.region));
    if (!doc.ok()) return doc.status();
    xmlNode* root = xmlDocGetRootElement(doc->get());
    for (const xmlNode* item : Items(Child(root, "availabilityZoneInfo"))) {
      zone_names_[ChildText(item, "zoneId")] = ChildText(item, "zoneName");
    }
  }
  std::map<std::string, int> by_zone;
  std::string next_token;
  for (int page = 0; page < 100; ++page) {
    std::vector<std::pair<std::string, std::string>> p = {
        {"InstanceType.1", instance_type},   {"TargetCapacity", absl::StrCat(count)},
        {"TargetCapacityUnitType", "units"}, {"SingleAvailabilityZone", "true"},
        {"RegionName.1", options_.region},   {"MaxResults", "10"}};
    if (!next_token.empty()) p.emplace_back("NextToken", next_token);
    absl::StatusOr<XmlDocPtr> doc =
        ParseResponse("GetSpotPlacementScores", Call("GetSpotPlacementScores", p, options_.region));
    if (!doc.ok()) return doc.status();
    xmlNode* root = xmlDocGetRootElement(doc->get());
    for (const xmlNode* item : Items(Child(root, "spotPlacementScoreSet"))) {
      auto name = zone_names_.find(ChildText(item, "availabilityZoneId"));
      int score = 0;
      if (name == zone_names_.end() || !absl::SimpleAtoi(ChildText(item, "score"), &score)) {
        continue;
      }
      const bool ours =
          std::any_of(options_.subnets.begin(), options_.subnets.end(),
                      [&](const AwsZoneSubnet& zs) { return zs.zone == name->second; });
      if (ours) by_zone[name->second] = score;
    }
    next_token = ChildText(root, "nextToken");
    if (next_token.empty()) break;
  }
  return by_zone;
}

std::vector<std::string> AwsProvider::ZonesFor(const std::string&) const {
  std::vector<std::string> zones;
  for (const AwsZoneSubnet& zs : options_.subnets) zones.push_back(zs.zone);
  return zones;
}

}  // namespace spotdnn::launcher
