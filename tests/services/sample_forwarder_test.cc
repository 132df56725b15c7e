// The sample forwarder with a scripted sink: batching, the spool across an outage and a restart,
// retries, deduplication, receiver rejections, and the backoff sequence.
#include "services/detector/sample_forwarder.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "gtest/gtest.h"

namespace spotdnn::services {
namespace {

namespace fs = std::filesystem;

// A sink whose availability the test switches; it records every batch it accepted.
class FakeSink final : public SampleSink {
 public:
  struct State {
    std::mutex mu;
    bool up = true;
    bool fail_after_storing = false;  // store the batch, then report a failure (unknown outcome)
    std::vector<std::vector<v1::Sample>> batches;  // stored batches, in order
    std::set<int64_t> reject_steps;                // steps the receiver refuses
    int calls = 0;
    int failures = 0;
  };
  explicit FakeSink(std::shared_ptr<State> state) : state_(std::move(state)) {}

  absl::StatusOr<SinkReply> Send(const std::vector<v1::Sample>& batch) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    ++state_->calls;
    if (!state_->up) {
      ++state_->failures;
      return absl::UnavailableError("profiler down");
    }
    SinkReply reply;
    std::vector<v1::Sample> stored;
    for (const v1::Sample& s : batch) {
      if (state_->reject_steps.count(s.step()) > 0) {
        ++reply.rejected;
        reply.errors.push_back("step " + std::to_string(s.step()) + ": refused");
      } else {
        ++reply.accepted;
        stored.push_back(s);
      }
    }
    state_->batches.push_back(stored);
    if (state_->fail_after_storing) {
      ++state_->failures;
      return absl::DeadlineExceededError("deadline exceeded after the store");
    }
    return reply;
  }

 private:
  std::shared_ptr<State> state_;
};

v1::Sample MakeSample(int64_t step, const std::string& worker = "w0") {
  v1::Sample s;
  s.set_job_id("job");
  s.set_worker_id(worker);
  s.set_step(step);
  s.set_iteration_time_s(0.1);
  return s;
}

// Every stored step, in order of arrival.
std::vector<int64_t> StoredSteps(FakeSink::State& state) {
  std::lock_guard<std::mutex> lock(state.mu);
  std::vector<int64_t> steps;
  for (const auto& batch : state.batches) {
    for (const v1::Sample& s : batch) steps.push_back(s.step());
  }
  return steps;
}

std::vector<int64_t> Range(int64_t from, int64_t to) {
  std::vector<int64_t> out;
  for (int64_t i = from; i <= to; ++i) out.push_back(i);
  return out;
}

class SampleForwarderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sample_forwarder_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  SampleForwarderOptions Options() const {
    SampleForwarderOptions o;
    o.spool_path = (dir_ / "samples.spool").string();
    o.batch_interval = absl::Milliseconds(20);
    o.backoff_initial = absl::Milliseconds(10);
    o.backoff_max = absl::Milliseconds(40);
    return o;
  }

  std::unique_ptr<SampleForwarder> StartWith(std::shared_ptr<FakeSink::State> state,
                                             SampleForwarderOptions options) {
    auto f = SampleForwarder::Start(std::move(options), std::make_unique<FakeSink>(state));
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? std::move(*f) : nullptr;
  }

  fs::path dir_;
};

TEST_F(SampleForwarderTest, BatchesHoldAtMostMaxBatchAndKeepTheOrder) {
  auto state = std::make_shared<FakeSink::State>();
  SampleForwarderOptions o = Options();
  o.max_batch = 100;
  auto f = StartWith(state, o);
  for (int i = 1; i <= 1050; ++i) ASSERT_EQ(f->Add(MakeSample(i)), AddOutcome::kQueued);
  ASSERT_TRUE(f->Flush(absl::Seconds(20)));
  EXPECT_EQ(StoredSteps(*state), Range(1, 1050));
  {
    std::lock_guard<std::mutex> lock(state->mu);
    EXPECT_GE(state->batches.size(), 11u);
    for (const auto& batch : state->batches) EXPECT_LE(batch.size(), 100u);
  }
  const SampleForwarderStats st = f->stats();
  EXPECT_EQ(st.queued, 1050u);
  EXPECT_EQ(st.acknowledged, 1050u);
  EXPECT_EQ(st.pending, 0u);
  EXPECT_EQ(st.failed_sends, 0u);
}

TEST_F(SampleForwarderTest, AnOutageLosesNothingAndSendsNothingTwice) {
  auto state = std::make_shared<FakeSink::State>();
  auto f = StartWith(state, Options());
  for (int i = 1; i <= 10; ++i) f->Add(MakeSample(i));
  ASSERT_TRUE(f->Flush(absl::Seconds(10)));
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->up = false;
  }
  for (int i = 11; i <= 300; ++i) f->Add(MakeSample(i));
  // Let several attempts fail.
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->failures >= 3) break;
  }
  EXPECT_GE(f->stats().failed_sends, 3u);
  EXPECT_EQ(f->stats().pending, 290u);
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->up = true;
  }
  for (int i = 301; i <= 400; ++i) f->Add(MakeSample(i));
  ASSERT_TRUE(f->Flush(absl::Seconds(10)));
  EXPECT_EQ(StoredSteps(*state), Range(1, 400));  // each once, oldest first
  EXPECT_EQ(f->stats().acknowledged, 400u);
}

TEST_F(SampleForwarderTest, TheSpoolCarriesUnsentSamplesAcrossARestart) {
  auto state = std::make_shared<FakeSink::State>();
  state->up = false;
  {
    auto f = StartWith(state, Options());
    for (int i = 1; i <= 120; ++i) f->Add(MakeSample(i));
    EXPECT_FALSE(f->Flush(absl::Milliseconds(100)));
    f->Close(absl::ZeroDuration());
    EXPECT_EQ(f->stats().pending, 120u);
  }
  EXPECT_TRUE(StoredSteps(*state).empty());
  state->up = true;
  auto g = StartWith(state, Options());
  EXPECT_EQ(g->stats().restored, 120u);
  // What was queued before the restart still counts for deduplication.
  EXPECT_EQ(g->Add(MakeSample(120)), AddOutcome::kDuplicate);
  EXPECT_EQ(g->Add(MakeSample(121)), AddOutcome::kQueued);
  ASSERT_TRUE(g->Flush(absl::Seconds(10)));
  g->Close(absl::ZeroDuration());
  EXPECT_EQ(StoredSteps(*state), Range(1, 121));

  // A third start finds everything acknowledged: nothing is sent again.
  auto h = StartWith(state, Options());
  EXPECT_EQ(h->stats().restored, 0u);
  EXPECT_EQ(h->Add(MakeSample(5)), AddOutcome::kDuplicate);
  ASSERT_TRUE(h->Flush(absl::Seconds(5)));
  EXPECT_EQ(StoredSteps(*state), Range(1, 121));
}

TEST_F(SampleForwarderTest, ACompactedSpoolStillSendsEachSampleOnce) {
  auto state = std::make_shared<FakeSink::State>();
  SampleForwarderOptions o = Options();
  o.max_batch = 64;
  auto f = StartWith(state, o);
  // Over 4096 acknowledged samples make the spool rewrite itself; an outage in the middle leaves
  // samples pending across the rewrite.
  for (int i = 1; i <= 5000; ++i) {
    if (i == 4000) {
      std::lock_guard<std::mutex> lock(state->mu);
      state->up = false;
    }
    f->Add(MakeSample(i));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->up = true;
  }
  ASSERT_TRUE(f->Flush(absl::Seconds(30)));
  f->Close(absl::ZeroDuration());
  EXPECT_EQ(StoredSteps(*state), Range(1, 5000));
  // The spool now holds the high-water mark and no samples.
  auto g = StartWith(state, o);
  EXPECT_EQ(g->stats().restored, 0u);
  EXPECT_EQ(g->Add(MakeSample(5000)), AddOutcome::kDuplicate);
  std::ifstream in(o.spool_path);
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) samples += line.rfind("S ", 0) == 0;
  EXPECT_EQ(samples, 0);
}

TEST_F(SampleForwarderTest, ATornLastLineIsSkippedAndCounted) {
  auto state = std::make_shared<FakeSink::State>();
  state->up = false;
  {
    auto f = StartWith(state, Options());
    for (int i = 1; i <= 3; ++i) f->Add(MakeSample(i));
    f->Close(absl::ZeroDuration());
  }
  {
    std::ofstream out(Options().spool_path, std::ios::app);
    out << "S Zm9vYmFy";  // no newline: the agent died while writing it
  }
  state->up = true;
  auto g = StartWith(state, Options());
  EXPECT_EQ(g->stats().restored, 3u);
  EXPECT_EQ(g->stats().spool_errors, 1u);
  ASSERT_TRUE(g->Flush(absl::Seconds(10)));
  EXPECT_EQ(StoredSteps(*state), Range(1, 3));
}

TEST_F(SampleForwarderTest, AFileThatIsNoSpoolIsRefused) {
  SampleForwarderOptions o = Options();
  std::ofstream(o.spool_path) << "precious data\n";
  auto f =
      SampleForwarder::Start(o, std::make_unique<FakeSink>(std::make_shared<FakeSink::State>()));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(f.status().message().find(o.spool_path), std::string::npos);
  std::ifstream in(o.spool_path);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "precious data");
}

TEST_F(SampleForwarderTest, DuplicatesAreKeyedByJobWorkerAndStep) {
  auto state = std::make_shared<FakeSink::State>();
  auto f = StartWith(state, Options());
  EXPECT_EQ(f->Add(MakeSample(1, "w0")), AddOutcome::kQueued);
  EXPECT_EQ(f->Add(MakeSample(2, "w0")), AddOutcome::kQueued);
  EXPECT_EQ(f->Add(MakeSample(2, "w0")), AddOutcome::kDuplicate);
  EXPECT_EQ(f->Add(MakeSample(1, "w0")), AddOutcome::kDuplicate);  // went backwards
  EXPECT_EQ(f->Add(MakeSample(2, "w1")), AddOutcome::kQueued);     // another worker
  v1::Sample other_job = MakeSample(2, "w0");
  other_job.set_job_id("job2");
  EXPECT_EQ(f->Add(other_job), AddOutcome::kQueued);
  // No step, no key: such samples are all sent.
  EXPECT_EQ(f->Add(MakeSample(0)), AddOutcome::kQueued);
  EXPECT_EQ(f->Add(MakeSample(0)), AddOutcome::kQueued);
  ASSERT_TRUE(f->Flush(absl::Seconds(10)));
  EXPECT_EQ(f->stats().duplicates, 2u);
  EXPECT_EQ(StoredSteps(*state), (std::vector<int64_t>{1, 2, 2, 2, 0, 0}));
}

TEST_F(SampleForwarderTest, RejectedSamplesAreAcknowledgedNotResent) {
  auto state = std::make_shared<FakeSink::State>();
  state->reject_steps = {2, 3};
  auto f = StartWith(state, Options());
  for (int i = 1; i <= 5; ++i) f->Add(MakeSample(i));
  ASSERT_TRUE(f->Flush(absl::Seconds(10)));
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(StoredSteps(*state), (std::vector<int64_t>{1, 4, 5}));
  EXPECT_EQ(f->stats().rejected, 2u);
  EXPECT_EQ(f->stats().acknowledged, 5u);
  std::lock_guard<std::mutex> lock(state->mu);
  EXPECT_EQ(state->calls, static_cast<int>(state->batches.size()));
}

// A call that failed after the receiver stored the batch is retried: only an idempotent store
// keeps that batch once. This pins down the documented at-least-once edge.
TEST_F(SampleForwarderTest, AnUnknownOutcomeIsRetried) {
  auto state = std::make_shared<FakeSink::State>();
  state->fail_after_storing = true;
  auto f = StartWith(state, Options());
  f->Add(MakeSample(1));
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->calls >= 2) break;
  }
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->fail_after_storing = false;
  }
  ASSERT_TRUE(f->Flush(absl::Seconds(10)));
  const std::vector<int64_t> steps = StoredSteps(*state);
  ASSERT_GE(steps.size(), 2u);
  for (int64_t s : steps) EXPECT_EQ(s, 1);
  EXPECT_EQ(f->stats().acknowledged, 1u);
}

TEST_F(SampleForwarderTest, BeyondMaxPendingNewSamplesAreDropped) {
  auto state = std::make_shared<FakeSink::State>();
  state->up = false;
  SampleForwarderOptions o = Options();
  o.max_pending = 5;
  auto f = StartWith(state, o);
  for (int i = 1; i <= 5; ++i) EXPECT_EQ(f->Add(MakeSample(i)), AddOutcome::kQueued);
  EXPECT_EQ(f->Add(MakeSample(6)), AddOutcome::kDropped);
  EXPECT_EQ(f->stats().dropped, 1u);
  // A dropped step was never queued: it may come again.
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->up = true;
  }
  ASSERT_TRUE(f->Flush(absl::Seconds(10)));
  EXPECT_EQ(f->Add(MakeSample(6)), AddOutcome::kQueued);
  ASSERT_TRUE(f->Flush(absl::Seconds(10)));
  EXPECT_EQ(StoredSteps(*state), Range(1, 6));
}

TEST_F(SampleForwarderTest, WithoutASinkSamplesAreOnlyCounted) {
  SampleForwarderOptions o = Options();
  auto f = SampleForwarder::Start(o, nullptr);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->Add(MakeSample(1)), AddOutcome::kQueued);
  EXPECT_EQ((*f)->Add(MakeSample(1)), AddOutcome::kDuplicate);
  EXPECT_TRUE((*f)->Flush(absl::ZeroDuration()));
  EXPECT_EQ((*f)->stats().queued, 1u);
  EXPECT_FALSE(fs::exists(o.spool_path));
}

TEST_F(SampleForwarderTest, BadOptionsNameTheField) {
  SampleForwarderOptions o = Options();
  o.max_batch = 0;
  auto f = SampleForwarder::Start(o, nullptr);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("max_batch = 0"), std::string::npos);
  o = Options();
  o.backoff_max = absl::Milliseconds(1);
  f = SampleForwarder::Start(o, nullptr);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("backoff_max"), std::string::npos);
}

TEST(ForwarderBackoff, DoublesFromTheInitialWaitUpToTheCap) {
  SampleForwarderOptions o;  // 200 ms doubling to 10 s
  const base::BackoffPolicy policy(ForwarderBackoff(o));
  base::Backoff backoff(policy);
  std::vector<int64_t> waits;
  for (int i = 0; i < 8; ++i) {
    std::optional<absl::Duration> d = backoff.Failed();
    ASSERT_TRUE(d.has_value()) << "the forwarder retries for as long as it runs";
    waits.push_back(absl::ToInt64Milliseconds(*d));
  }
  EXPECT_EQ(waits, (std::vector<int64_t>{200, 400, 800, 1600, 3200, 6400, 10000, 10000}));
}

}  // namespace
}  // namespace spotdnn::services
