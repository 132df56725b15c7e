// The detector's store on SQLite and PostgreSQL: registrations, seen notice keys, the event log
// and lifetimes survive a reopen; events trim and load newest-last.
#include "detector/detector_store.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/postgres_server.h"

namespace spotdnn::detector {
namespace {

using testing_util::StoreBackend;

class DetectorStoreTest : public testing_util::StoreBackendTest {
 protected:
  static StoredInstance Instance(const std::string& id, InstanceState state) {
    StoredInstance i;
    i.instance.instance_id = id;
    i.instance.job_id = "job";
    i.instance.cloud = Cloud::kAws;
    i.instance.metadata_endpoint = "http://127.0.0.1:1/" + id;
    i.instance.state = state;
    i.instance.instance_type = "p3.2xlarge";
    i.instance.registered_unix_ms = 1'700'000'000'000;
    return i;
  }
};

TEST_P(DetectorStoreTest, StateSurvivesAReopen) {
  {
    auto store = DetectorStore::Open(spec_);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutInstance(Instance("i-1", InstanceState::kHealthy)).ok());
    ASSERT_TRUE((*store)->PutInstance(Instance("i-2", InstanceState::kHealthy)).ok());
    StoredInstance noticed = Instance("i-1", InstanceState::kNotice);
    noticed.notice_effective_unix_ms = 1'700'000'120'000;
    for (uint64_t seq = 1; seq <= 4; ++seq) {
      Event e{.sequence = seq,
              .instance_id = "i-1",
              .job_id = "job",
              .cloud = Cloud::kAws,
              .kind = EventKind::kNotice,
              .action = "terminate",
              .notice_unix_ms = static_cast<int64_t>(seq),
              .detail = absl::StrCat("event ", seq)};
      ASSERT_TRUE((*store)->AppendEvent(e, noticed, absl::StrCat("key-", seq % 2)).ok());
    }
    ASSERT_TRUE((*store)->TrimEvents(2).ok());
    ASSERT_TRUE((*store)->DeleteInstance("i-2").ok());
    ASSERT_TRUE((*store)
                    ->AddLifetime({.instance_id = "i-9",
                                   .instance_type = "p3.2xlarge",
                                   .started_unix_ms = 1,
                                   .ended_unix_ms = 5,
                                   .revoked = true,
                                   .how = "notice"})
                    .ok());
    ASSERT_TRUE((*store)
                    ->AddLifetime({.instance_id = "i-8",
                                   .instance_type = "g4dn.xlarge",
                                   .started_unix_ms = 2,
                                   .ended_unix_ms = 9,
                                   .how = "lost"})
                    .ok());
  }
  auto store = DetectorStore::Open(spec_);
  ASSERT_TRUE(store.ok()) << store.status();
  auto instances = (*store)->LoadInstances();
  ASSERT_TRUE(instances.ok()) << instances.status();
  ASSERT_EQ(instances->size(), 1u);
  EXPECT_EQ((*instances)[0].instance.instance_id, "i-1");
  EXPECT_EQ((*instances)[0].instance.state, InstanceState::kNotice);
  EXPECT_EQ((*instances)[0].instance.cloud, Cloud::kAws);
  EXPECT_EQ((*instances)[0].instance.instance_type, "p3.2xlarge");
  EXPECT_EQ((*instances)[0].instance.registered_unix_ms, 1'700'000'000'000);
  EXPECT_EQ((*instances)[0].notice_effective_unix_ms, 1'700'000'120'000);
  auto seen = (*store)->LoadSeen();
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ(seen->size(), 2u);  // key-0 and key-1, each once
  auto events = (*store)->LoadEvents(2);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 2u);  // the newest two, oldest first
  EXPECT_EQ((*events)[0].sequence, 3u);
  EXPECT_EQ((*events)[1].detail, "event 4");
  EXPECT_EQ((*store)->LoadEvents(100)->size(), 3u);  // 1 was trimmed
  auto lifetimes = (*store)->LoadLifetimes("", 10);
  ASSERT_TRUE(lifetimes.ok()) << lifetimes.status();
  ASSERT_EQ(lifetimes->size(), 2u);
  EXPECT_EQ((*lifetimes)[0].instance_id, "i-9");
  EXPECT_TRUE((*lifetimes)[0].revoked);
  auto of_type = (*store)->LoadLifetimes("g4dn.xlarge", 10);
  ASSERT_EQ(of_type->size(), 1u);
  EXPECT_EQ((*of_type)[0].how, "lost");
}

TEST_P(DetectorStoreTest, ANewLifetimeForgetsTheSeenKeysAndAnEventIsStoredOnce) {
  auto store = DetectorStore::Open(spec_);
  ASSERT_TRUE(store.ok()) << store.status();
  const StoredInstance i = Instance("i-1", InstanceState::kHealthy);
  Event e{.sequence = 7, .instance_id = "i-1", .kind = EventKind::kNotice};
  ASSERT_TRUE((*store)->AppendEvent(e, i, "k").ok());
  // The same sequence again is refused, and nothing of it is kept.
  Event again = e;
  again.detail = "again";
  EXPECT_EQ((*store)->AppendEvent(again, Instance("i-1", InstanceState::kLost), "other").code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ((*store)->LoadSeen()->size(), 1u);
  EXPECT_EQ((*store)->LoadInstances()->front().instance.state, InstanceState::kHealthy);
  ASSERT_TRUE((*store)->ResetInstance(i).ok());
  EXPECT_TRUE((*store)->LoadSeen()->empty());
  EXPECT_EQ((*store)->LoadInstances()->size(), 1u);
}

TEST_P(DetectorStoreTest, ANoticeIsRecordedOncePerLifetimeAndKeyWhateverReplicaReportsIt) {
  auto a = DetectorStore::Open(spec_);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = DetectorStore::Open(spec_);  // another replica's connection
  ASSERT_TRUE(b.ok()) << b.status();
  auto epoch_a = (*a)->JoinLease("a", 60000);
  auto epoch_b = (*b)->JoinLease("b", 60000);
  ASSERT_TRUE(epoch_a.ok()) << epoch_a.status();
  ASSERT_TRUE(epoch_b.ok()) << epoch_b.status();
  StoredInstance i = Instance("i-1", InstanceState::kHealthy);
  ASSERT_TRUE((*a)->PutInstance(i).ok());
  i.instance.state = InstanceState::kNotice;
  const int64_t lifetime = i.instance.registered_unix_ms;
  Event e{.instance_id = "i-1", .job_id = "job", .kind = EventKind::kNotice, .action = "stop"};
  EXPECT_EQ((*a)->AppendSharedEvent(e, lifetime, "k1", i, "a", *epoch_a).value_or(false), true);
  // The same notice from the other replica, and again from the first: kept once.
  EXPECT_EQ((*b)->AppendSharedEvent(e, lifetime, "k1", i, "b", *epoch_b).value_or(true), false);
  EXPECT_EQ((*a)->AppendSharedEvent(e, lifetime, "k1", i, "a", *epoch_a).value_or(true), false);
  // Another notice, and the same key in a new lifetime, are new events.
  EXPECT_EQ((*b)->AppendSharedEvent(e, lifetime, "k2", i, "b", *epoch_b).value_or(false), true);
  EXPECT_EQ((*b)->AppendSharedEvent(e, lifetime + 1, "k1", i, "b", *epoch_b).value_or(false), true);
  // Events without a key (lost, recovered) are never merged.
  Event lost{.instance_id = "i-1", .kind = EventKind::kRecovered};
  EXPECT_EQ((*a)->AppendSharedEvent(lost, lifetime, "", i, "a", *epoch_a).value_or(false), true);
  EXPECT_EQ((*a)->AppendSharedEvent(lost, lifetime, "", i, "a", *epoch_a).value_or(false), true);
  auto events = (*b)->EventsAfter(0, 100);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 5u);
  for (size_t k = 1; k < events->size(); ++k) {
    EXPECT_GT((*events)[k].sequence, (*events)[k - 1].sequence);
  }
  EXPECT_EQ((*a)->EventsAfter((*events)[2].sequence, 100)->size(), 2u);
  // The state went with the first report.
  EXPECT_EQ((*b)->LoadInstance("i-1")->value().instance.state, InstanceState::kNotice);
}

TEST_P(DetectorStoreTest, ALeaseTakenOverOrExpiredFencesItsHolder) {
  auto a = DetectorStore::Open(spec_);
  ASSERT_TRUE(a.ok()) << a.status();
  auto first = (*a)->JoinLease("a", 60000);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE((*a)->RenewLease("a", *first, 60000).value_or(false));
  // The same replica id joins again (a restart, or a paused process's successor): a new epoch,
  // and the old one can neither renew nor write.
  auto second = (*a)->JoinLease("a", 60000);
  ASSERT_TRUE(second.ok());
  EXPECT_GT(*second, *first);
  EXPECT_FALSE((*a)->RenewLease("a", *first, 60000).value_or(true));
  const StoredInstance i = Instance("i-1", InstanceState::kNotice);
  ASSERT_TRUE((*a)->PutInstance(i).ok());
  Event e{.instance_id = "i-1", .kind = EventKind::kNotice};
  auto stale = (*a)->AppendSharedEvent(e, 1, "k", i, "a", *first);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition) << stale.status();
  EXPECT_NE(std::string(stale.status().message()).find("epoch " + std::to_string(*first)),
            std::string::npos)
      << stale.status();
  EXPECT_TRUE((*a)->EventsAfter(0, 10)->empty());
  // An expired lease is not live and cannot be renewed. (Leases are judged on the database's
  // clock: one taken with a negative length ended before it was taken, with no wait.)
  auto b = (*a)->JoinLease("b", -1000);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE((*a)->RenewLease("b", *b, 60000).value_or(true));
  auto live = (*a)->LiveLeases();
  ASSERT_TRUE(live.ok()) << live.status();
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ(live->front().replica_id, "a");
  EXPECT_EQ(live->front().epoch, *second);
  // A lease expired 20 leases ago is forgotten when another replica joins; its id joining again
  // gets a newer epoch all the same, so a holder of the old one stays fenced off.
  auto c = (*a)->JoinLease("c", -1000);  // expired a second ago: 1000 of d's 1 ms leases
  ASSERT_TRUE(c.ok());
  // An epoch is the database's clock in ms: by the time a lease is forgotten, that clock has gone
  // on (by 20 leases); here, by a millisecond or two (SQLite's julianday may round one down).
  ASSERT_TRUE(testing_util::Eventually([&] { return base::RealClock::Get().NowUnixMs() > *c + 1; },
                                       absl::Seconds(1), absl::Milliseconds(1)));
  auto d = (*a)->JoinLease("d", 1);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*a)->LeaveLease("d", *d).ok());
  auto c_again = (*a)->JoinLease("c", 60000);
  ASSERT_TRUE(c_again.ok());
  EXPECT_GT(*c_again, *c);
  EXPECT_FALSE((*a)->RenewLease("c", *c, 60000).value_or(true));
  EXPECT_TRUE((*a)->RenewLease("c", *c_again, 60000).value_or(false));
  ASSERT_TRUE((*a)->LeaveLease("c", *c_again).ok());
  // Leaving ends a lease at once.
  ASSERT_TRUE((*a)->LeaveLease("a", *second).ok());
  EXPECT_TRUE((*a)->LiveLeases()->empty());
}

INSTANTIATE_TEST_SUITE_P(Backends, DetectorStoreTest,
                         ::testing::Values(StoreBackend::kSqlite, StoreBackend::kPostgres),
                         testing_util::StoreBackendName);

}  // namespace
}  // namespace spotdnn::detector
