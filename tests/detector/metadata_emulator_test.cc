// The emulator speaks each cloud's paths, headers, status codes and JSON.
#include "detector/metadata_emulator.h"

#include "detector/metadata_parsers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace spotdnn::detector {
namespace {

class EmulatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = MetadataEmulator::Start({});
    ASSERT_TRUE(e.ok()) << e.status();
    emulator_ = *std::move(e);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", emulator_->port());
  }
  std::unique_ptr<MetadataEmulator> emulator_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(EmulatorTest, AwsImdsV2TokenAndNotice) {
  const httplib::Headers none;
  auto no_ttl = client_->Put("/i/a/latest/api/token", none, "", "text/plain");
  ASSERT_TRUE(no_ttl);
  EXPECT_EQ(no_ttl->status, 400);
  auto token = client_->Put("/i/a/latest/api/token",
                            {{"X-aws-ec2-metadata-token-ttl-seconds", "60"}}, "", "text/plain");
  ASSERT_TRUE(token);
  ASSERT_EQ(token->status, 200);
  EXPECT_TRUE(ParseAwsToken(token->body).ok());
  auto without = client_->Get("/i/a/latest/meta-data/spot/instance-action");
  EXPECT_EQ(without->status, 401);
  const httplib::Headers auth = {{"X-aws-ec2-metadata-token", token->body}};
  EXPECT_EQ(client_->Get("/i/a/latest/meta-data/spot/instance-action", auth)->status, 404);
  emulator_->ScheduleNotice(
      "a", {.cloud = Cloud::kAws, .action = "stop", .effective_unix_ms = 1505722920000});
  auto notice = client_->Get("/i/a/latest/meta-data/spot/instance-action", auth);
  ASSERT_EQ(notice->status, 200);
  auto parsed = ParseAwsInstanceAction(notice->body);
  ASSERT_TRUE(parsed.ok()) << notice->body;
  EXPECT_EQ(parsed->action, "stop");
  EXPECT_EQ(parsed->effective_unix_ms, 1505722920000);
  // Other instances are unaffected; an expired token is refused.
  EXPECT_EQ(client_->Get("/i/b/latest/meta-data/spot/instance-action", auth)->status, 401);
  emulator_->ExpireTokens("a");
  EXPECT_EQ(client_->Get("/i/a/latest/meta-data/spot/instance-action", auth)->status, 401);
  EXPECT_EQ(emulator_->Stats("a").token_requests, 1);
}

TEST_F(EmulatorTest, GceNeedsTheFlavorHeaderAndLongPolls) {
  EXPECT_EQ(client_->Get("/i/g/computeMetadata/v1/instance/preempted")->status, 403);
  const httplib::Headers flavor = {{"Metadata-Flavor", "Google"}};
  auto first = client_->Get("/i/g/computeMetadata/v1/instance/preempted", flavor);
  ASSERT_EQ(first->status, 200);
  EXPECT_EQ(first->body, "FALSE");
  EXPECT_EQ(first->get_header_value("Metadata-Flavor"), "Google");
  const std::string etag = first->get_header_value("ETag");
  ASSERT_FALSE(etag.empty());
  emulator_->ScheduleNotice(
      "g", {.cloud = Cloud::kGce, .visible_at_unix_ms = base::RealClock::Get().NowUnixMs() + 50});
  auto changed = client_->Get(
      "/i/g/computeMetadata/v1/instance/preempted?wait_for_change=true&timeout_sec=10&last_etag=" +
          etag,
      flavor);
  ASSERT_EQ(changed->status, 200);
  EXPECT_EQ(changed->body, "TRUE");
  EXPECT_NE(changed->get_header_value("ETag"), etag);
  EXPECT_EQ(client_->Get("/i/g/computeMetadata/v1/instance/maintenance-event", flavor)->body,
            "NONE");
}

TEST_F(EmulatorTest, AzureScheduledEventsAndAck) {
  EXPECT_EQ(client_->Get("/i/z/metadata/scheduledevents?api-version=2020-07-01")->status, 400);
  const httplib::Headers md = {{"Metadata", "true"}};
  EXPECT_EQ(client_->Get("/i/z/metadata/scheduledevents", md)->status, 400);
  emulator_->ScheduleNotice("z", {.cloud = Cloud::kAzure});
  auto doc = client_->Get("/i/z/metadata/scheduledevents?api-version=2020-07-01", md);
  ASSERT_EQ(doc->status, 200);
  auto parsed = ParseAzureScheduledEvents(doc->body);
  ASSERT_TRUE(parsed.ok()) << doc->body;
  ASSERT_EQ(parsed->events.size(), 1u);
  EXPECT_EQ(parsed->events[0].event_type, "Preempt");
  EXPECT_GT(parsed->events[0].not_before_unix_ms, 0);
  EXPECT_EQ(parsed->events[0].resources, std::vector<std::string>{"z"});
  auto ack =
      client_->Post("/i/z/metadata/scheduledevents?api-version=2020-07-01", md,
                    AzureStartRequestsBody({parsed->events[0].event_id}), "application/json");
  EXPECT_EQ(ack->status, 200);
  EXPECT_THAT(emulator_->Stats("z").azure_acks, ::testing::ElementsAre(parsed->events[0].event_id));
  auto after = ParseAzureScheduledEvents(
      client_->Get("/i/z/metadata/scheduledevents?api-version=2020-07-01", md)->body);
  ASSERT_TRUE(after.ok());
  EXPECT_GT(after->document_incarnation, parsed->document_incarnation);
  EXPECT_EQ(after->events[0].event_status, "Started");
}

TEST_F(EmulatorTest, AzureComputeNameAndAvailabilitySet) {
  const httplib::Headers md = {{"Metadata", "true"}};
  EXPECT_EQ(client_->Get("/i/a/metadata/instance/compute?api-version=2021-02-01")->status, 400);
  auto compute = client_->Get("/i/a/metadata/instance/compute?api-version=2021-02-01", md);
  ASSERT_EQ(compute->status, 200);
  auto name = ParseAzureComputeName(compute->body);
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(*name, "a");
  auto unprefixed = client_->Get("/metadata/instance/compute?api-version=2021-02-01", md);
  EXPECT_EQ(*ParseAzureComputeName(unprefixed->body), "vm-emulated");

  // a's eviction shows to every instance (one availability set), b's only to b.
  ASSERT_EQ(
      client_->Post("/emulator/notice?instance=a&cloud=azure&all_instances=true", "", "text/plain")
          ->status,
      200);
  emulator_->ScheduleNotice("b", {.cloud = Cloud::kAzure});
  EXPECT_EQ(
      client_->Post("/emulator/notice?instance=a&cloud=azure&all_instances=yes", "", "text/plain")
          ->status,
      400);
  auto document = [&](const std::string& id) {
    auto parsed = ParseAzureScheduledEvents(
        client_->Get("/i/" + id + "/metadata/scheduledevents?api-version=2020-07-01", md)->body);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    return parsed.ok() ? *parsed : AzureScheduledEvents{};
  };
  const AzureScheduledEvents c = document("c");
  ASSERT_EQ(c.events.size(), 1u);
  EXPECT_EQ(c.events[0].resources, std::vector<std::string>{"a"});
  EXPECT_TRUE(AzureNotices(c, "c").empty());
  const AzureScheduledEvents b = document("b");
  ASSERT_EQ(b.events.size(), 2u);
  EXPECT_EQ(AzureNotices(b, "b").size(), 1u);
  ASSERT_EQ(document("a").events.size(), 1u);
  // Whoever sees an event may approve it: it starts for the VM it names.
  auto ack = client_->Post("/i/c/metadata/scheduledevents?api-version=2020-07-01", md,
                           AzureStartRequestsBody({c.events[0].event_id}), "application/json");
  EXPECT_EQ(ack->status, 200);
  EXPECT_THAT(emulator_->Stats("c").azure_acks, ::testing::ElementsAre(c.events[0].event_id));
  const AzureScheduledEvents a = document("a");
  ASSERT_EQ(a.events.size(), 1u);
  EXPECT_EQ(a.events[0].event_status, "Started");
  EXPECT_GT(document("c").document_incarnation, c.document_incarnation);
  emulator_->ClearNotices("a");
  EXPECT_TRUE(document("c").events.empty());
}

TEST_F(EmulatorTest, FaultsAndControlRoutes) {
  emulator_->SetFault("f", EmulatorFault::kServerError);
  EXPECT_EQ(
      client_->Get("/i/f/computeMetadata/v1/instance/preempted", {{"Metadata-Flavor", "Google"}})
          ->status,
      500);
  auto control = client_->Post("/emulator/fault?instance=f&fault=garbage", "", "text/plain");
  ASSERT_EQ(control->status, 200);
  auto garbage =
      client_->Get("/i/f/computeMetadata/v1/instance/preempted", {{"Metadata-Flavor", "Google"}});
  EXPECT_EQ(garbage->status, 200);
  EXPECT_FALSE(ParseGcePreempted(garbage->body).ok());
  EXPECT_EQ(client_->Post("/emulator/fault?instance=f&fault=maybe", "", "text/plain")->status, 400);
  ASSERT_EQ(
      client_->Post("/emulator/notice?instance=n&cloud=gce&in_ms=0", "", "text/plain")->status,
      200);
  EXPECT_EQ(
      client_->Get("/i/n/computeMetadata/v1/instance/preempted", {{"Metadata-Flavor", "Google"}})
          ->body,
      "TRUE");
}

}  // namespace
}  // namespace spotdnn::detector
