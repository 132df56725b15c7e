// spotdnn-agent's logic: polls the instance's own metadata service with the detector's poller and
// streams heartbeats and notices to a detector replica, failing over to the next replica in its
// list when the stream breaks. Every notice read is re-sent on each new stream (the detector
// reports a notice key once), so a reconnect cannot drop one. Each new notice is also handed to
// an optional callback (the instance wrapper tells the training process).
#ifndef SPOTDNN_SERVICES_DETECTOR_AGENT_H_
#define SPOTDNN_SERVICES_DETECTOR_AGENT_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "detector/metadata_poller.h"
#include "detector/types.h"
#include "grpcpp/grpcpp.h"

namespace spotdnn::services {

// What an agent watches and where it reports.
struct AgentOptions {
  // host:port of the replicas, tried in order; empty: no detector stream (notices go to
  // on_notice only)
  std::vector<std::string> detectors;
  std::string instance_id;
  std::string job_id;
  detector::Cloud cloud = detector::Cloud::kUnspecified;
  std::string metadata_endpoint;  // empty: the cloud's (http://169.254.169.254, …)
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration reconnect_backoff = absl::Milliseconds(200);
  detector::PollerOptions poller;
  // Called on the poller thread once per new notice key (rebalance and maintenance events
  // included: see Notice::kind), before the notice is queued for the detector.
  std::function<void(const detector::Notice&)> on_notice;
};

// The default metadata endpoint of a cloud (the real link-local services).
std::string DefaultMetadataEndpoint(detector::Cloud cloud);

// The agent. Thread-safe.
class Agent {
 public:
  explicit Agent(AgentOptions options);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Starts polling (and streaming, when detectors are given). INVALID_ARGUMENT naming the option
  // that is wrong.
  absl::Status Start();
  // Stops both. Idempotent.
  void Stop();
  // Waits up to `timeout` until every notice read so far has been acknowledged by a detector
  // (true), so that stopping right after a notice (the command ended at its signal) does not
  // lose it. True at once without detectors.
  bool Flush(absl::Duration timeout);
  // Reports that the command ended by itself (not a revocation): sent like a notice (again on
  // every new stream until a detector acknowledges it; Flush waits for it), so that the detector
  // expects no more heartbeats and the job is told how it ended.
  void ReportExit(const detector::CommandExit& exit);
  // The replica that acknowledged the last report ("" before the first).
  std::string replica() const;
  // Reports the detector acknowledged.
  uint64_t acked() const { return acked_.load(); }

 private:
  void OnPoll(const detector::PollResult& result);
  void SendLoop();

  AgentOptions options_;
  std::unique_ptr<detector::MetadataPoller> poller_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::string problem_;                              // why local polling fails ("" = fine)
  std::map<std::string, detector::Notice> notices_;  // every notice read, by key
  std::deque<std::string> pending_;                  // keys not yet sent on the current stream
  std::set<std::string> unacked_;                    // keys no detector has acknowledged yet
  std::string replica_;
  grpc::ClientContext* context_ = nullptr;  // of the open stream, for Stop()
  std::atomic<uint64_t> acked_{0};
  std::thread sender_;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_DETECTOR_AGENT_H_
