#include "detector/metadata_parsers.h"

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
  auto notices = AzureNotices(*d);
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
    EXPECT_TRUE(AzureNotices(*d).empty()) << body;
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
  auto notices = AzureNotices(*d);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].kind, EventKind::kNotice);
  EXPECT_EQ(notices[0].key, "azure:P");
  EXPECT_EQ(notices[0].effective_unix_ms, 1474309787000);
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
