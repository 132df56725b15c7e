#include "services/detector/agent.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/limits.h"
#include "services/common/server.h"
#include "services/detector/detector_service.h"
#include "spdlog/spdlog.h"
#include "spotdnn/v1/detector.grpc.pb.h"

namespace spotdnn::services {

std::string DefaultMetadataEndpoint(detector::Cloud cloud) {
  // Production defaults only; tests always pass an emulator's endpoint.
  return cloud == detector::Cloud::kGce ? "http://metadata.google.internal"
                                        : "http://169.254.169.254";
}

Agent::Agent(AgentOptions options) : options_(std::move(options)) {}

Agent::~Agent() { Stop(); }

absl::Status Agent::Start() {
  for (const std::string& d : options_.detectors) {
    if (d.find(':') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("detector = \"", d, "\": expected HOST:PORT"));
    }
  }
  if (options_.instance_id.empty()) {
    return absl::InvalidArgumentError("instance_id = \"\": must not be empty");
  }
  // The detector refuses longer ones (on every reconnect): fail here, at start.
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"instance_id", &options_.instance_id},
        {"job_id", &options_.job_id}}) {
    if (value->size() > limits::kMaxNameBytes) {
      return absl::InvalidArgumentError(limits::LengthError(field, *value, limits::kMaxNameBytes));
    }
  }
  if (options_.metadata_endpoint.empty()) {
    options_.metadata_endpoint = DefaultMetadataEndpoint(options_.cloud);
  }
  poller_ = std::make_unique<detector::MetadataPoller>(
      options_.poller, [this](const detector::PollResult& r) { OnPoll(r); });
  if (auto s = poller_->Add({options_.instance_id, options_.cloud, options_.metadata_endpoint});
      !s.ok()) {
    return s;
  }
  if (auto s = poller_->Start(); !s.ok()) return s;
  if (!options_.detectors.empty()) sender_ = std::thread([this] { SendLoop(); });
  return absl::OkStatus();
}

void Agent::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  cv_.notify_all();
  if (sender_.joinable()) sender_.join();
  if (poller_) poller_->Stop();
}

bool Agent::Flush(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!sender_.joinable()) return true;
  cv_.wait_for(lock, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)),
               [this] { return unacked_.empty() || stopping_; });
  return unacked_.empty();
}

std::string Agent::replica() const {
  std::lock_guard<std::mutex> lock(mu_);
  return replica_;
}

void Agent::ReportExit(const detector::CommandExit& exit) {
  const detector::Notice n = detector::ExitNotice(exit);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.detectors.empty() || !notices_.emplace(n.key, n).second) return;
    unacked_.insert(n.key);
    pending_.push_back(n.key);
  }
  cv_.notify_all();
}

void Agent::OnPoll(const detector::PollResult& r) {
  std::vector<detector::Notice> fresh;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string problem = r.healthy ? "" : r.reason;
    if (problem.empty() != problem_.empty()) {
      // Said when it changes only: a metadata service that cannot be read hides every notice.
      auto logger = spdlog::get("spotdnn-agent");
      if (!logger) logger = spdlog::default_logger();
      if (problem.empty()) {
        logger->info("metadata service {} answers again", options_.metadata_endpoint);
      } else {
        logger->warn("metadata service {}: {} (retrying)", options_.metadata_endpoint, problem);
      }
    }
    problem_ = problem;
    for (const detector::Notice& n : r.notices) {
      if (notices_.emplace(n.key, n).second) {
        fresh.push_back(n);
        unacked_.insert(n.key);  // before the callback: a Flush after it must wait for it
      }
    }
  }
  if (fresh.empty()) return;
  // The callback first (it may signal the training process), outside the lock.
  if (options_.on_notice) {
    for (const detector::Notice& n : fresh) options_.on_notice(n);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const detector::Notice& n : fresh) pending_.push_back(n.key);
  }
  cv_.notify_all();
}

void Agent::SendLoop() {
  auto logger = spdlog::get("spotdnn-agent");
  if (!logger) logger = spdlog::default_logger();
  size_t index = 0;
  const auto heartbeat =
      std::chrono::milliseconds(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  while (true) {
    const std::string target = options_.detectors[index % options_.detectors.size()];
    auto stub = v1::Detector::NewStub(MakeChannel(target));
    grpc::ClientContext context;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      context_ = &context;
      // A new stream: every notice read so far goes out again (the detector dedupes by key).
      pending_.clear();
      for (const auto& [key, n] : notices_) pending_.push_back(key);
    }
    auto stream = stub->AgentStream(&context);
    bool ok = true;
    auto send = [&](const v1::AgentReport& report) {
      v1::AgentAck ack;
      if (!stream->Write(report) || !stream->Read(&ack)) return false;
      acked_.fetch_add(1);
      std::lock_guard<std::mutex> lock(mu_);
      replica_ = ack.replica();
      return true;
    };
    auto next_heartbeat = std::chrono::steady_clock::now();
    while (ok) {
      std::string notice_key;  // the notice this report carries, if any
      v1::AgentReport report;
      report.set_instance_id(options_.instance_id);
      report.set_job_id(options_.job_id);
      report.set_cloud(ToProto(options_.cloud));
      report.set_unix_ms(base::RealClock::Get().NowUnixMs());
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_until(lock, next_heartbeat, [this] { return stopping_ || !pending_.empty(); });
        if (stopping_) break;
        if (!pending_.empty()) {
          const detector::Notice& n = notices_.at(pending_.front());
          notice_key = n.key;
          pending_.pop_front();
          v1::RevocationEvent* e = report.mutable_event();
          e->set_instance_id(options_.instance_id);
          e->set_job_id(options_.job_id);
          e->set_cloud(ToProto(options_.cloud));
          e->set_kind(static_cast<v1::RevocationEvent::Kind>(n.kind));
          e->set_notice_unix_ms(base::RealClock::Get().NowUnixMs());
          e->set_effective_unix_ms(n.effective_unix_ms);
          if (n.kind == detector::EventKind::kExited) {
            // ExitNotice kept it within the detector's limits.
            const detector::CommandExit exit = detector::ExitOf(n.action, n.detail);
            e->set_exit_status(exit.status);
            e->set_detail(exit.how);
            for (const std::string& line : exit.last_lines) e->add_last_lines(line);
          } else {
            // Within the detector's limits, or it would refuse the stream (and again on every
            // reconnect).
            e->set_action(limits::ValidUtf8(n.action, limits::kMaxNameBytes));
            e->set_detail(limits::ValidUtf8(n.detail, limits::kMaxTextBytes));
          }
          report.set_notice_key(limits::BoundedKey(n.key));
        } else {
          report.set_heartbeat(true);
          report.set_problem(limits::ValidUtf8(problem_, limits::kMaxTextBytes));
          next_heartbeat = std::chrono::steady_clock::now() + heartbeat;
        }
      }
      ok = send(report);
      if (ok && !notice_key.empty()) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          unacked_.erase(notice_key);
        }
        cv_.notify_all();
      }
    }
    stream->WritesDone();
    const grpc::Status status = stream->Finish();
    {
      std::lock_guard<std::mutex> lock(mu_);
      context_ = nullptr;
      if (stopping_) return;
    }
    logger->warn("detector {} stream ended ({}); trying the next replica", target,
                 status.error_message());
    ++index;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock,
                 std::chrono::milliseconds(absl::ToInt64Milliseconds(options_.reconnect_backoff)),
                 [this] { return stopping_; });
  }
}

}  // namespace spotdnn::services
