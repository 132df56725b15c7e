#include "detector/metadata_parsers.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace spotdnn::detector {
namespace {

using Json = nlohmann::json;

// JSON text of `value` for error messages; never throws.
std::string Dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// A short, printable excerpt of `text` for error messages.
std::string Excerpt(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 60)) {
    out += (c >= 0x20 && c < 0x7f && c != '"') ? c : '?';
  }
  if (text.size() > 60) out += "…";
  return out;
}

absl::Status Invalid(std::string_view what, std::string_view text, std::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(what), " = \"", Excerpt(text), "\": ", std::string(expected)));
}

absl::StatusOr<Json> ParseObject(std::string_view what, std::string_view body) {
  if (body.size() > kMaxMetadataBody) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": answer of ", body.size(), " bytes is too long"));
  }
  Json json = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return Invalid(what, body, "not valid JSON");
  if (!json.is_object()) return Invalid(what, body, "expected a JSON object");
  return json;
}

absl::StatusOr<std::string> StringField(std::string_view what, const Json& object, const char* name,
                                        bool required = true) {
  auto it = object.find(name);
  if (it == object.end()) {
    if (!required) return std::string();
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": field \"", name, "\" is missing"));
  }
  if (!it->is_string()) {
    return Invalid(absl::StrCat(std::string(what), ".", name), Dump(*it), "expected a string");
  }
  return it->get<std::string>();
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && absl::ascii_isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && absl::ascii_isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

// One event of a Scheduled Events document; `what` names it in errors.
absl::StatusOr<AzureScheduledEvent> ParseAzureEvent(const std::string& what, const Json& e) {
  if (!e.is_object()) return Invalid(what, Dump(e), "expected an object");
  AzureScheduledEvent event;
  auto id = StringField(what, e, "EventId");
  if (!id.ok()) return id.status();
  if (id->empty()) return Invalid(what + ".EventId", *id, "must not be empty");
  event.event_id = *id;
  auto type = StringField(what, e, "EventType");
  if (!type.ok()) return type.status();
  if (type->empty()) return Invalid(what + ".EventType", *type, "must not be empty");
  event.event_type = *type;
  auto resource_type = StringField(what, e, "ResourceType", false);
  if (!resource_type.ok()) return resource_type.status();
  event.resource_type = *resource_type;
  auto status = StringField(what, e, "EventStatus", false);
  if (!status.ok()) return status.status();
  event.event_status = *status;
  auto not_before = StringField(what, e, "NotBefore", false);
  if (!not_before.ok()) return not_before.status();
  if (!not_before->empty()) {
    auto ms = ParseHttpDateMs(what + ".NotBefore", *not_before);
    if (!ms.ok()) return ms.status();
    event.not_before_unix_ms = *ms;
  }
  auto description = StringField(what, e, "Description", false);
  if (!description.ok()) return description.status();
  event.description = *description;
  auto source = StringField(what, e, "EventSource", false);
  if (!source.ok()) return source.status();
  event.event_source = *source;
  if (auto r = e.find("Resources"); r != e.end()) {
    if (!r->is_array()) return Invalid(what + ".Resources", Dump(*r), "expected an array");
    for (const Json& name : *r) {
      if (!name.is_string()) return Invalid(what + ".Resources", Dump(name), "expected strings");
      event.resources.push_back(name.get<std::string>());
    }
  }
  if (auto d = e.find("DurationInSeconds"); d != e.end()) {
    if (!d->is_number_integer()) {
      return Invalid(what + ".DurationInSeconds", Dump(*d), "expected an integer");
    }
    event.duration_s = d->get<int64_t>();
  }
  return event;
}

}  // namespace

absl::StatusOr<int64_t> ParseRfc3339Ms(std::string_view field, std::string_view text) {
  absl::Time t;
  std::string error;
  if (text.size() > 64 || !absl::ParseTime(absl::RFC3339_full, std::string(text), &t, &error)) {
    return Invalid(field, text, "expected an RFC 3339 time such as 2017-09-18T08:22:00Z");
  }
  return absl::ToUnixMillis(t);
}

absl::StatusOr<int64_t> ParseHttpDateMs(std::string_view field, std::string_view text) {
  absl::Time t;
  std::string error;
  if (text.size() > 64 ||
      !absl::ParseTime("%a, %d %b %Y %H:%M:%S GMT", std::string(text), &t, &error)) {
    return Invalid(field, text, "expected an HTTP date such as Mon, 19 Sep 2016 18:29:47 GMT");
  }
  return absl::ToUnixMillis(t);
}

absl::StatusOr<Notice> ParseAwsInstanceAction(std::string_view body) {
  constexpr std::string_view kWhat = "instance-action";
  auto json = ParseObject(kWhat, body);
  if (!json.ok()) return json.status();
  auto action = StringField(kWhat, *json, "action");
  if (!action.ok()) return action.status();
  if (*action != "terminate" && *action != "stop" && *action != "hibernate") {
    return Invalid("instance-action.action", *action, "expected terminate, stop or hibernate");
  }
  auto time = StringField(kWhat, *json, "time");
  if (!time.ok()) return time.status();
  auto ms = ParseRfc3339Ms("instance-action.time", *time);
  if (!ms.ok()) return ms.status();
  Notice notice;
  notice.kind = EventKind::kNotice;
  notice.action = *action;
  notice.effective_unix_ms = *ms;
  notice.key = absl::StrCat("aws:instance-action:", *action, ":", *time);
  notice.detail = absl::StrCat("spot/instance-action ", *action, " at ", *time);
  return notice;
}

absl::StatusOr<Notice> ParseAwsRebalance(std::string_view body) {
  constexpr std::string_view kWhat = "rebalance";
  auto json = ParseObject(kWhat, body);
  if (!json.ok()) return json.status();
  auto time = StringField(kWhat, *json, "noticeTime");
  if (!time.ok()) return time.status();
  auto ms = ParseRfc3339Ms("rebalance.noticeTime", *time);
  if (!ms.ok()) return ms.status();
  Notice notice;
  notice.kind = EventKind::kRebalance;
  notice.action = "rebalance";
  notice.issued_unix_ms = *ms;
  notice.key = absl::StrCat("aws:rebalance:", *time);
  notice.detail = absl::StrCat("rebalance recommendation, noticeTime ", *time);
  return notice;
}

absl::StatusOr<std::string> ParseAwsToken(std::string_view body) {
  if (body.empty() || body.size() > 512) {
    return Invalid("api/token", body, "expected a token of 1 to 512 characters");
  }
  for (char c : body) {
    if (c <= 0x20 || c >= 0x7f) return Invalid("api/token", body, "expected visible ASCII");
  }
  return std::string(body);
}

absl::StatusOr<bool> ParseGcePreempted(std::string_view body) {
  const std::string_view value = Trim(body);
  if (value == "TRUE") return true;
  if (value == "FALSE") return false;
  return Invalid("instance/preempted", body, "expected TRUE or FALSE");
}

absl::StatusOr<std::string> ParseGceMaintenanceEvent(std::string_view body) {
  // Only the documented values: a cut-short answer ("NO", "TERMINATE_ON") must not read as an
  // event.
  const std::string_view value = Trim(body);
  if (value == "NONE" || value == "MIGRATE_ON_HOST_MAINTENANCE" ||
      value == "TERMINATE_ON_HOST_MAINTENANCE") {
    return std::string(value);
  }
  return Invalid("instance/maintenance-event", body,
                 "expected NONE, MIGRATE_ON_HOST_MAINTENANCE or TERMINATE_ON_HOST_MAINTENANCE");
}

absl::StatusOr<AzureScheduledEvents> ParseAzureScheduledEvents(std::string_view body) {
  constexpr std::string_view kWhat = "scheduledevents";
  auto json = ParseObject(kWhat, body);
  if (!json.ok()) return json.status();
  AzureScheduledEvents document;
  auto inc = json->find("DocumentIncarnation");
  if (inc == json->end()) {
    return absl::InvalidArgumentError("scheduledevents: field \"DocumentIncarnation\" is missing");
  }
  if (!inc->is_number_integer()) {
    return Invalid("scheduledevents.DocumentIncarnation", Dump(*inc), "expected an integer");
  }
  document.document_incarnation = inc->get<int64_t>();
  auto events = json->find("Events");
  if (events == json->end()) {
    return absl::InvalidArgumentError("scheduledevents: field \"Events\" is missing");
  }
  if (!events->is_array()) {
    return Invalid("scheduledevents.Events", Dump(*events), "expected an array");
  }
  for (size_t i = 0; i < events->size(); ++i) {
    auto event = ParseAzureEvent(absl::StrCat("scheduledevents.Events[", i, "]"), (*events)[i]);
    if (event.ok()) {
      document.events.push_back(*std::move(event));
    } else {
      document.malformed.emplace_back(event.status().message());
    }
  }
  return document;
}

absl::StatusOr<std::string> ParseAzureComputeName(std::string_view body) {
  constexpr std::string_view kWhat = "instance/compute";
  auto json = ParseObject(kWhat, body);
  if (!json.ok()) return json.status();
  auto name = StringField(kWhat, *json, "name");
  if (!name.ok()) return name.status();
  const bool allowed = std::all_of(name->begin(), name->end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
  if (name->empty() || name->size() > 128 || !allowed) {
    return Invalid("instance/compute.name", *name,
                   "expected a VM name of 1 to 128 letters, digits, '-', '_' or '.'");
  }
  return *std::move(name);
}

bool AzureEventNamesVm(const AzureScheduledEvent& event, std::string_view vm_name) {
  if (vm_name.empty()) return false;
  return std::find(event.resources.begin(), event.resources.end(), vm_name) !=
         event.resources.end();
}

std::vector<Notice> AzureNotices(const AzureScheduledEvents& document, std::string_view vm_name) {
  std::vector<Notice> notices;
  for (const AzureScheduledEvent& e : document.events) {
    if (!AzureEventNamesVm(e, vm_name)) continue;
    Notice n;
    n.kind = (e.event_type == "Preempt" || e.event_type == "Terminate") ? EventKind::kNotice
                                                                        : EventKind::kMaintenance;
    n.action = e.event_type;
    n.effective_unix_ms = e.not_before_unix_ms;
    n.key = absl::StrCat("azure:", e.event_id);
    n.detail = absl::StrCat("scheduled event ", e.event_id, " ", e.event_type, " (", e.event_status,
                            ", incarnation ", document.document_incarnation, ")");
    notices.push_back(std::move(n));
  }
  return notices;
}

std::vector<std::string> AzurePreemptsToAcknowledge(const AzureScheduledEvents& document,
                                                    std::string_view vm_name) {
  std::vector<std::string> ids;
  for (const AzureScheduledEvent& e : document.events) {
    if (e.event_type == "Preempt" && e.event_status != "Started" && AzureEventNamesVm(e, vm_name)) {
      ids.push_back(e.event_id);
    }
  }
  return ids;
}

std::string AzureStartRequestsBody(const std::vector<std::string>& event_ids) {
  Json body = Json::object();
  Json requests = Json::array();
  for (const std::string& id : event_ids) requests.push_back(Json{{"EventId", id}});
  body["StartRequests"] = std::move(requests);
  return body.dump();
}

absl::StatusOr<std::vector<std::string>> ParseAzureStartRequests(std::string_view body) {
  auto json = ParseObject("StartRequests body", body);
  if (!json.ok()) return json.status();
  auto requests = json->find("StartRequests");
  if (requests == json->end() || !requests->is_array()) {
    return Invalid("StartRequests", body, "expected {\"StartRequests\": [{\"EventId\": …}]}");
  }
  std::vector<std::string> ids;
  for (const Json& r : *requests) {
    if (!r.is_object()) return Invalid("StartRequests[]", Dump(r), "expected an object");
    auto id = StringField("StartRequests[]", r, "EventId");
    if (!id.ok()) return id.status();
    ids.push_back(*id);
  }
  return ids;
}

}  // namespace spotdnn::detector
