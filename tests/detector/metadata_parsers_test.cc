#include "detector/metadata_parsers.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace spotdnn::detector {
namespace {

using ::testing::HasSubstr;

TEST(AwsInstanceAction, ParsesActionAndTime) {
  auto n = ParseAwsInstanceAction(R"({"action": "terminate", "time": "2017-09-18T08:22:00Z"})");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->kind, EventKind::kNotice);
  EXPECT_EQ(n->action, "terminate");
  EXPECT_EQ(n->effective_unix_ms, 1505722920000);
  auto stop = ParseAwsInstanceAction(R"({"action":"stop","time":"2017-09-18T08:22:00.5Z"})");
  ASSERT_TRUE(stop.ok());
  EXPECT_EQ(stop->action, "stop");
  EXPECT_EQ(stop->effective_unix_ms, 1505722920500);
  EXPECT_NE(stop->key, n->key);
}

TEST(AwsInstanceAction, RejectsWhatIsNotANotice) {
  for (const char* body : {"", "{", "[]", "null", "terminate", R"({"action": "terminate"})",
                           R"({"time": "2017-09-18T08:22:00Z"})",
                           R"({"action": "reboot", "time": "2017-09-18T08:22:00Z"})",
                           R"({"action": 1, "time": "2017-09-18T08:22:00Z"})",
                           R"({"action": "terminate", "time": "tomorrow"})",
                           R"({"action": "terminate", "time": "2017-09-18T08:2)"}) {
    EXPECT_FALSE(ParseAwsInstanceAction(body).ok()) << body;
  }
  EXPECT_THAT(
      std::string(
          ParseAwsInstanceAction(R"({"action": "reboot", "time": "x"})").status().message()),
      HasSubstr("instance-action.action = \"reboot\""));
  EXPECT_THAT(
      std::string(
          ParseAwsInstanceAction(std::string(kMaxMetadataBody + 1, ' ')).status().message()),
      HasSubstr("too long"));
}

TEST(AwsRebalance, ParsesNoticeTime) {
  auto n = ParseAwsRebalance(R"({"noticeTime": "2020-11-05T08:22:00Z"})");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->kind, EventKind::kRebalance);
  EXPECT_EQ(n->issued_unix_ms, 1604564520000);
  EXPECT_FALSE(ParseAwsRebalance(R"({"noticeTime": 5})").ok());
  EXPECT_FALSE(ParseAwsRebalance(R"({})").ok());
}

TEST(AwsToken, AcceptsVisibleAscii) {
  EXPECT_TRUE(ParseAwsToken("AQAEAabc==").ok());
  EXPECT_FALSE(ParseAwsToken("").ok());
  EXPECT_FALSE(ParseAwsToken("has space").ok());
  EXPECT_FALSE(ParseAwsToken(std::string(600, 'a')).ok());
}

TEST(Gce, PreemptedAndMaintenance) {
  EXPECT_EQ(*ParseGcePreempted("TRUE"), true);
  EXPECT_EQ(*ParseGcePreempted("FALSE\n"), false);
  EXPECT_FALSE(ParseGcePreempted("true").ok());
  EXPECT_FALSE(ParseGcePreempted("TR").ok());
  EXPECT_FALSE(ParseGcePreempted("").ok());
  EXPECT_EQ(*ParseGceMaintenanceEvent("TERMINATE_ON_HOST_MAINTENANCE"),
            "TERMINATE_ON_HOST_MAINTENANCE");
  EXPECT_EQ(*ParseGceMaintenanceEvent("NONE"), "NONE");
  EXPECT_FALSE(ParseGceMaintenanceEvent("<html>").ok());
  EXPECT_FALSE(ParseGceMaintenanceEvent("NO").ok());
  EXPECT_FALSE(ParseGceMaintenanceEvent("TERMINATE_ON").ok());
  EXPECT_FALSE(ParseGceMaintenanceEvent("").ok());
}

constexpr char kAzureDocument[] = R"({
  "DocumentIncarnation": 3,
  "Events": [
    {"EventId": "602d9444-d2cd-49c7-8624-8643e7171297", "EventType": "Preempt",
     "ResourceType": "VirtualMachine", "Resources": ["vm1"], "EventStatus": "Scheduled",
     "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", "Description": "evicted",
     "EventSource": "Platform", "DurationInSeconds": -1},
    {"EventId": "B", "EventType": "Reboot", "ResourceType": "VirtualMachine",
     "Resources": ["vm1"], "EventStatus": "Started", "NotBefore": "", "Description": "",
     "EventSource": "User", "DurationInSeconds": 15}
  ]})";

TEST(Azure, ParsesScheduledEvents) {
  auto d = ParseAzureScheduledEvents(kAzureDocument);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->document_incarnation, 3);
  ASSERT_EQ(d->events.size(), 2u);
  EXPECT_EQ(d->events[0].event_type, "Preempt");
  EXPECT_EQ(d->events[0].not_before_unix_ms, 1474309787000);
  EXPECT_EQ(d->events[1].not_before_unix_ms, 0);
  EXPECT_EQ(d->events[1].duration_s, 15);
  auto notices = AzureNotices(*d, "vm1");
  ASSERT_EQ(notices.size(), 2u);
  EXPECT_EQ(notices[0].kind, EventKind::kNotice);
  EXPECT_EQ(notices[0].effective_unix_ms, 1474309787000);
  EXPECT_EQ(notices[1].kind, EventKind::kMaintenance);
  auto empty = ParseAzureScheduledEvents(R"({"DocumentIncarnation": 0, "Events": []})");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->events.empty());
}

TEST(Azure, RejectsMalformedDocuments) {
  for (const char* body : {"", "{}", R"({"DocumentIncarnation": 1})", R"({"Events": []})",
                           R"({"DocumentIncarnation": "1", "Events": []})",
                           R"({"DocumentIncarnation": 1, "Events": {}})"}) {
    EXPECT_FALSE(ParseAzureScheduledEvents(body).ok()) << body;
  }
  std::string truncated(kAzureDocument);
  truncated.resize(truncated.size() / 2);
  EXPECT_FALSE(ParseAzureScheduledEvents(truncated).ok());
}

TEST(Azure, MalformedEventsAreNamedAndNeverNotices) {
  for (const char* body :
       {R"({"DocumentIncarnation": 1, "Events": [1]})",
        R"({"DocumentIncarnation": 1, "Events": [{"EventType": "Preempt"}]})",
        R"({"DocumentIncarnation": 1, "Events": [{"EventId": "a", "EventType": "Preempt",
            "NotBefore": "soon"}]})"}) {
    auto d = ParseAzureScheduledEvents(body);
    ASSERT_TRUE(d.ok()) << body;
    EXPECT_TRUE(d->events.empty()) << body;
    ASSERT_EQ(d->malformed.size(), 1u) << body;
    EXPECT_THAT(d->malformed[0], HasSubstr("scheduledevents.Events[0]")) << body;
    EXPECT_TRUE(AzureNotices(*d, "vm1").empty()) << body;
  }
}

TEST(Azure, MalformedEventDoesNotHideAValidPreempt) {
  constexpr char kMixed[] = R"({"DocumentIncarnation": 4, "Events": [
    {"EventId": "bad", "EventType": "Preempt", "NotBefore": "soon"},
    {"EventId": "P", "EventType": "Preempt", "ResourceType": "VirtualMachine",
     "Resources": ["vm1"], "EventStatus": "Scheduled",
     "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"},
    {"EventId": "R", "EventType": "Reboot", "Resources": "vm1"}
  ]})";
  auto d = ParseAzureScheduledEvents(kMixed);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->events.size(), 1u);
  EXPECT_EQ(d->events[0].event_id, "P");
  ASSERT_EQ(d->malformed.size(), 2u);
  EXPECT_THAT(d->malformed[0], HasSubstr("scheduledevents.Events[0].NotBefore = \"soon\""));
  EXPECT_THAT(d->malformed[1], HasSubstr("scheduledevents.Events[2].Resources"));
  auto notices = AzureNotices(*d, "vm1");
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].kind, EventKind::kNotice);
  EXPECT_EQ(notices[0].key, "azure:P");
  EXPECT_EQ(notices[0].effective_unix_ms, 1474309787000);
}

// What every VM of an availability set sees: one neighbour's eviction, another's maintenance, an
// event for this VM among others, and one that names no VM.
constexpr char kAvailabilitySetDocument[] = R"({"DocumentIncarnation": 7, "Events": [
  {"EventId": "other-evicted", "EventType": "Preempt", "ResourceType": "VirtualMachine",
   "Resources": ["vm2"], "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"},
  {"EventId": "other-freeze", "EventType": "Freeze", "ResourceType": "VirtualMachine",
   "Resources": ["vm3"], "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"},
  {"EventId": "mine", "EventType": "Preempt", "ResourceType": "VirtualMachine",
   "Resources": ["vm0", "vm1"], "EventStatus": "Scheduled",
   "NotBefore": "Mon, 19 Sep 2016 18:30:47 GMT"},
  {"EventId": "nobody", "EventType": "Preempt", "ResourceType": "VirtualMachine",
   "Resources": [], "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"},
  {"EventId": "no-list", "EventType": "Preempt", "EventStatus": "Scheduled"}
]})";

TEST(Azure, OnlyEventsNamingThisVmAreItsNotices) {
  auto d = ParseAzureScheduledEvents(kAvailabilitySetDocument);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->events.size(), 5u);
  EXPECT_TRUE(d->malformed.empty());
  auto mine = AzureNotices(*d, "vm1");
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].key, "azure:mine");
  EXPECT_EQ(mine[0].kind, EventKind::kNotice);
  EXPECT_EQ(mine[0].effective_unix_ms, 1474309847000);
  EXPECT_EQ(AzurePreemptsToAcknowledge(*d, "vm1"), std::vector<std::string>{"mine"});
  // The neighbours each see theirs, and only theirs.
  auto vm2 = AzureNotices(*d, "vm2");
  ASSERT_EQ(vm2.size(), 1u);
  EXPECT_EQ(vm2[0].key, "azure:other-evicted");
  auto vm3 = AzureNotices(*d, "vm3");
  ASSERT_EQ(vm3.size(), 1u);
  EXPECT_EQ(vm3[0].kind, EventKind::kMaintenance);
  EXPECT_TRUE(AzurePreemptsToAcknowledge(*d, "vm3").empty());  // a Freeze is not acknowledged
  // A VM the document does not name has no notice: not from a neighbour's event, not from one
  // with an empty (or no) Resources list.
  EXPECT_TRUE(AzureNotices(*d, "vm4").empty());
  EXPECT_TRUE(AzurePreemptsToAcknowledge(*d, "vm4").empty());
  // Exactly as Azure writes the names: no case folding, no prefix or substring match.
  EXPECT_TRUE(AzureNotices(*d, "VM1").empty());
  EXPECT_TRUE(AzureNotices(*d, "vm").empty());
  EXPECT_TRUE(AzureNotices(*d, "vm1 ").empty());
  // An unknown name (empty) names no VM.
  EXPECT_TRUE(AzureNotices(*d, "").empty());
  EXPECT_TRUE(AzurePreemptsToAcknowledge(*d, "").empty());
}

TEST(Azure, StartedPreemptIsNotAcknowledgedAgain) {
  auto d = ParseAzureScheduledEvents(kAzureDocument);
  ASSERT_TRUE(d.ok());
  d->events[0].event_status = "Started";
  EXPECT_TRUE(AzurePreemptsToAcknowledge(*d, "vm1").empty());
  EXPECT_EQ(AzureNotices(*d, "vm1").size(), 2u);  // still this VM's notice
}

TEST(Azure, ComputeName) {
  auto name = ParseAzureComputeName(
      R"({"name": "spotdnn-0a1b2c3d4e5f6a7b-3", "location": "eastus", "vmSize": "Standard_NC6"})");
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(*name, "spotdnn-0a1b2c3d4e5f6a7b-3");
  auto scale_set = ParseAzureComputeName(R"({"name": "myScaleSet_4", "vmScaleSetName": "x"})");
  ASSERT_TRUE(scale_set.ok());
  EXPECT_EQ(*scale_set, "myScaleSet_4");
  for (const char* body :
       {"", "vm1", "{\"name\": \"vm1\"", "[]", "{}", R"({"name": 3})", R"({"name": ""})",
        R"({"name": "vm 1"})", R"({"name": "<html>"})", R"({"name": "vm1\n"})"}) {
    auto bad = ParseAzureComputeName(body);
    EXPECT_FALSE(bad.ok()) << body;
    EXPECT_THAT(bad.status().message(), HasSubstr("instance/compute")) << body;
  }
  EXPECT_FALSE(
      ParseAzureComputeName(absl::StrCat(R"({"name": ")", std::string(129, 'a'), "\"}")).ok());
}

TEST(Azure, StartRequestsRoundTrip) {
  auto ids = ParseAzureStartRequests(AzureStartRequestsBody({"a", "b"}));
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(ParseAzureStartRequests("{}").ok());
}

TEST(Times, Rfc3339AndHttpDate) {
  EXPECT_EQ(*ParseRfc3339Ms("t", "1970-01-01T00:00:01Z"), 1000);
  EXPECT_EQ(*ParseRfc3339Ms("t", "1970-01-01T01:00:01+01:00"), 1000);
  EXPECT_EQ(*ParseHttpDateMs("t", "Thu, 01 Jan 1970 00:00:02 GMT"), 2000);
  EXPECT_THAT(std::string(ParseHttpDateMs("NotBefore", "never").status().message()),
              HasSubstr("NotBefore = \"never\""));
}

}  // namespace
}  // namespace spotdnn::detector
