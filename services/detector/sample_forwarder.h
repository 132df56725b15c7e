// The instance wrapper's sample stream: samples parsed from the training process's output go to
// the profiler's ReportSamples in batches (every `batch_interval` or `max_batch` samples),
// written ahead to a spool file so that a profiler outage or an agent restart loses none, retried
// with exponential backoff, oldest first, and never queued twice for one (job, worker, step).
//
// Guarantees: a batch is removed from the spool only after its ReportSamples call returned OK,
// and is never sent again after that (the acknowledgement is appended to the spool before the
// next batch goes). A batch whose call failed is sent again, so the profiler may store it twice if
// the failure came after it stored the batch (a deadline, a broken connection): the profiler's
// store deduplicates (job, worker, step) for that case. If the agent dies between the OK and
// writing the acknowledgement, the restarted agent sends that batch again (same caveat).
#ifndef SPOTDNN_SERVICES_DETECTOR_SAMPLE_FORWARDER_H_
#define SPOTDNN_SERVICES_DETECTOR_SAMPLE_FORWARDER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/backoff.h"
#include "spotdnn/v1/profiler.pb.h"

namespace spotdnn::services {

// What the receiver answered for one batch.
struct SinkReply {
  uint64_t accepted = 0;
  uint64_t rejected = 0;
  std::vector<std::string> errors;  // the receiver's first rejection reasons
};

// Where batches go. Send is called by one thread at a time; Cancel may be called from another.
class SampleSink {
 public:
  virtual ~SampleSink() = default;
  // Sends one batch. OK only when the receiver answered for the whole batch.
  virtual absl::StatusOr<SinkReply> Send(const std::vector<::spotdnn::v1::Sample>& batch) = 0;
  // Makes a Send in progress (and every later one) return an error soon.
  virtual void Cancel() {}
};

// Profiler.ReportSamples at `target` (HOST:PORT, the default client security), one call per
// batch, each with `deadline`.
std::unique_ptr<SampleSink> MakeProfilerSink(const std::string& target,
                                             absl::Duration deadline = absl::Seconds(10));

// How the forwarder batches, spools and retries.
struct SampleForwarderOptions {
  std::string spool_path;  // "" = no spool file (pending samples live in memory only)
  absl::Duration batch_interval = absl::Milliseconds(200);  // the longest a sample waits
  int max_batch = 512;                                      // samples per ReportSamples call
  absl::Duration backoff_initial = absl::Milliseconds(200);
  absl::Duration backoff_max = absl::Seconds(10);
  size_t max_pending = 1'000'000;  // beyond this, new samples are dropped (and counted)
  int max_logged = 10;             // rejections and duplicates logged with their reason
};

// The forwarder's retries as the tree's one backoff (base/backoff.h): the wait after the n-th
// failure in a row is backoff_initial doubled n-1 times, capped at backoff_max, no jitter, and
// sends are tried for as long as the forwarder runs.
base::BackoffOptions ForwarderBackoff(const SampleForwarderOptions& options);

// Counters, for logs and tests.
struct SampleForwarderStats {
  uint64_t queued = 0;        // accepted by Add (restored ones not included)
  uint64_t restored = 0;      // unacknowledged samples read back from the spool at start
  uint64_t duplicates = 0;    // Add calls refused: (job, worker, step) already queued or sent
  uint64_t dropped = 0;       // refused because max_pending were waiting
  uint64_t acknowledged = 0;  // in batches whose call returned OK (rejected ones included)
  uint64_t rejected = 0;      // of those, samples the receiver refused (not sent again)
  uint64_t batches = 0;       // calls that returned OK
  uint64_t failed_sends = 0;  // calls that failed (their samples stay pending)
  uint64_t pending = 0;       // waiting to be sent (or for a retry)
  uint64_t spool_errors = 0;  // spool lines that could not be read or written
};

// What Add did with a sample.
enum class AddOutcome { kQueued, kDuplicate, kDropped };

// The forwarder. Thread-safe.
class SampleForwarder {
 public:
  // Opens (creating it when absent) the spool, restores what it holds that was never
  // acknowledged (and the highest step queued per job and worker, for deduplication), and starts
  // sending. Without a sink, samples are only counted (no spool is used). INVALID_ARGUMENT for
  // bad options; the spool's path and error when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<SampleForwarder>> Start(SampleForwarderOptions options,
                                                                std::unique_ptr<SampleSink> sink);
  ~SampleForwarder();
  SampleForwarder(const SampleForwarder&) = delete;
  SampleForwarder& operator=(const SampleForwarder&) = delete;

  // Queues a sample (written to the spool first). A sample whose step (when not 0) is at or
  // below the highest step already queued for its (job, worker) is a duplicate and not queued.
  AddOutcome Add(::spotdnn::v1::Sample sample);
  // Waits up to `timeout` until nothing is pending; true when everything was acknowledged.
  // Pending samples are sent at once (no batch wait, short retry waits) while it waits.
  bool Flush(absl::Duration timeout);
  // Flush(timeout), then stops sending; what was not acknowledged stays in the spool.
  // Idempotent; the destructor calls Close(0).
  void Close(absl::Duration timeout);
  SampleForwarderStats stats() const;

 private:
  struct Pending {
    ::spotdnn::v1::Sample sample;
    std::chrono::steady_clock::time_point queued_at;
  };

  SampleForwarder(SampleForwarderOptions options, std::unique_ptr<SampleSink> sink);
  absl::Status OpenSpool();  // restores and compacts; before the thread
  void AppendSpoolLocked(const std::string& line);
  absl::Status CompactSpoolLocked();
  bool IsDuplicateLocked(const ::spotdnn::v1::Sample& sample);
  void SendLoop();

  SampleForwarderOptions options_;
  base::BackoffPolicy backoff_policy_;
  std::unique_ptr<SampleSink> sink_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // wakes the sender
  std::condition_variable idle_cv_;  // wakes Flush when pending drains
  std::deque<Pending> pending_;
  std::map<std::pair<std::string, std::string>, int64_t> high_water_;  // (job, worker) -> step
  int spool_fd_ = -1;
  uint64_t spool_samples_ = 0;  // "S" records in the spool file
  uint64_t spool_acked_ = 0;    // of those, acknowledged (the last "A" record)
  SampleForwarderStats stats_;
  int flushing_ = 0;  // Flush calls waiting
  bool stopping_ = false;
  bool closed_ = false;
  int logged_ = 0;
  std::thread sender_;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_DETECTOR_SAMPLE_FORWARDER_H_
