#include "services/detector/sample_forwarder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "provisioner/launcher/checkpoint_sync.h"
#include "services/common/convert.h"
#include "services/common/security.h"
#include "spdlog/spdlog.h"
#include "spotdnn/v1/profiler.grpc.pb.h"

namespace spotdnn::services {
namespace {

using Clock = std::chrono::steady_clock;

// The spool's first line; a file starting otherwise is not read (it is not ours).
constexpr char kSpoolHeader[] = "# spotdnn-agent sample spool v1";
// Acknowledged samples a spool may hold before it is rewritten with the pending ones only.
constexpr uint64_t kCompactAfter = 4096;

std::shared_ptr<spdlog::logger> Logger() {
  auto logger = spdlog::get("spotdnn-agent");
  return logger ? logger : spdlog::default_logger();
}

Clock::duration ToChrono(absl::Duration d) {
  return std::chrono::duration_cast<Clock::duration>(absl::ToChronoNanoseconds(d));
}

std::string Encode(char kind, const v1::Sample& sample) {
  return absl::StrCat(std::string(1, kind), " ", absl::Base64Escape(sample.SerializeAsString()),
                      "\n");
}

bool Decode(absl::string_view text, v1::Sample* sample) {
  std::string bytes;
  return absl::Base64Unescape(text, &bytes) && sample->ParseFromString(bytes);
}

std::pair<std::string, std::string> KeyOf(const v1::Sample& s) {
  return {s.job_id(), s.worker_id()};
}

// The reply an INVALID_ARGUMENT answer of ReportSamples stands for when it carries the stream's
// counts (spotdnn-accepted, spotdnn-rejected in trailing metadata); nullopt for any other error.
std::optional<SinkReply> AnsweredWithRefusals(const grpc::ClientContext& context,
                                              const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::INVALID_ARGUMENT) return std::nullopt;
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto count = [&](const char* key) -> std::optional<uint64_t> {
    auto it = trailers.find(key);
    uint64_t n = 0;
    if (it == trailers.end() ||
        !absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &n)) {
      return std::nullopt;
    }
    return n;
  };
  const std::optional<uint64_t> accepted = count("spotdnn-accepted");
  const std::optional<uint64_t> rejected = count("spotdnn-rejected");
  if (!accepted || !rejected) return std::nullopt;
  SinkReply reply;
  reply.accepted = *accepted;
  reply.rejected = *rejected;
  reply.errors.push_back(status.error_message());
  return reply;
}

class ProfilerSink final : public SampleSink {
 public:
  ProfilerSink(const std::string& target, absl::Duration deadline)
      : target_(target), stub_(v1::Profiler::NewStub(MakeChannel(target))), deadline_(deadline) {}

  absl::StatusOr<SinkReply> Send(const std::vector<v1::Sample>& batch) override {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline_));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancelled_) return absl::CancelledError("the forwarder is stopping");
      context_ = &context;
    }
    v1::ReportSamplesResponse response;
    auto writer = stub_->ReportSamples(&context, &response);
    for (const v1::Sample& s : batch) {
      if (!writer->Write(s)) break;  // Finish says why
    }
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
    {
      std::lock_guard<std::mutex> lock(mu_);
      context_ = nullptr;
    }
    if (!status.ok()) {
      // The profiler read the whole stream and answers for every message, but refuses some it
      // could not parse (it says so with INVALID_ARGUMENT and its counts in trailing metadata):
      // an answer for the whole batch, not a failure to send it again and again.
      if (std::optional<SinkReply> answered = AnsweredWithRefusals(context, status)) {
        return *answered;
      }
      // A fresh channel for the next attempt: gRPC's own reconnect backoff (up to minutes) must
      // not delay the first batch after the profiler is back; the forwarder paces the retries.
      stub_ = v1::Profiler::NewStub(MakeChannel(target_));
      return FromGrpc(status);
    }
    SinkReply reply;
    reply.accepted = response.accepted();
    reply.rejected = response.rejected();
    reply.errors.assign(response.errors().begin(), response.errors().end());
    return reply;
  }

  void Cancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }

 private:
  const std::string target_;
  std::unique_ptr<v1::Profiler::Stub> stub_;  // used by Send only (one at a time)
  absl::Duration deadline_;
  std::mutex mu_;
  bool cancelled_ = false;
  grpc::ClientContext* context_ = nullptr;
};

}  // namespace

std::unique_ptr<SampleSink> MakeProfilerSink(const std::string& target, absl::Duration deadline) {
  return std::make_unique<ProfilerSink>(target, deadline);
}

base::BackoffOptions ForwarderBackoff(const SampleForwarderOptions& options) {
  return {.max_attempts = 0,
          .initial = options.backoff_initial,
          .max = options.backoff_max,
          .jitter = base::Jitter::kNone};
}

absl::StatusOr<std::unique_ptr<SampleForwarder>> SampleForwarder::Start(
    SampleForwarderOptions options, std::unique_ptr<SampleSink> sink) {
  if (options.max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch = ", options.max_batch, ": must be at least 1"));
  }
  if (options.batch_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_interval = ", absl::FormatDuration(options.batch_interval),
                     ": must not be negative"));
  }
  if (options.backoff_initial <= absl::ZeroDuration() ||
      options.backoff_max < options.backoff_initial) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backoff_initial = ", absl::FormatDuration(options.backoff_initial), ", backoff_max = ",
        absl::FormatDuration(options.backoff_max), ": need 0 < initial <= max"));
  }
  if (options.max_pending < 1) {
    return absl::InvalidArgumentError("max_pending = 0: must be at least 1");
  }
  std::unique_ptr<SampleForwarder> f(new SampleForwarder(std::move(options), std::move(sink)));
  if (f->sink_ == nullptr) return f;  // counting only
  if (absl::Status s = f->OpenSpool(); !s.ok()) return s;
  f->sender_ = std::thread([p = f.get()] { p->SendLoop(); });
  return f;
}

SampleForwarder::SampleForwarder(SampleForwarderOptions options, std::unique_ptr<SampleSink> sink)
    : options_(std::move(options)),
      backoff_policy_(ForwarderBackoff(options_)),
      sink_(std::move(sink)) {}

SampleForwarder::~SampleForwarder() { Close(absl::ZeroDuration()); }

absl::Status SampleForwarder::OpenSpool() {
  const std::string& path = options_.spool_path;
  if (path.empty()) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  std::string content;
  {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream buffer;
      buffer << in.rdbuf();
      content = buffer.str();
    }
  }
  if (!content.empty() && content.rfind(kSpoolHeader, 0) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("spool = \"", path,
                     "\": the file exists and is not a spotdnn-agent sample spool; name another"));
  }
  std::vector<v1::Sample> samples;
  uint64_t acked = 0;
  std::vector<absl::string_view> lines = absl::StrSplit(content, '\n');
  // The part after the last newline is a line the agent was writing when it stopped.
  if (!lines.empty()) {
    if (!lines.back().empty()) ++stats_.spool_errors;
    lines.pop_back();
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    if (line.size() < 2 || line[1] != ' ') {
      ++stats_.spool_errors;
      continue;
    }
    const absl::string_view rest = line.substr(2);
    v1::Sample sample;
    uint64_t n = 0;
    switch (line[0]) {
      case 'S':
      case 'H':
        if (!Decode(rest, &sample)) {
          ++stats_.spool_errors;
          break;
        }
        if (sample.step() != 0) {
          auto [it, added] = high_water_.emplace(KeyOf(sample), sample.step());
          if (!added) it->second = std::max(it->second, sample.step());
        }
        if (line[0] == 'S') samples.push_back(std::move(sample));
        break;
      case 'A':
        if (absl::SimpleAtoi(rest, &n)) {
          acked = std::max(acked, n);
        } else {
          ++stats_.spool_errors;
        }
        break;
      default:
        ++stats_.spool_errors;
    }
  }
  const auto ready = Clock::now() - ToChrono(options_.batch_interval);
  for (size_t i = std::min<uint64_t>(acked, samples.size()); i < samples.size(); ++i) {
    pending_.push_back({std::move(samples[i]), ready});
  }
  stats_.restored = pending_.size();
  stats_.pending = pending_.size();
  if (absl::Status s = CompactSpoolLocked(); !s.ok()) return s;
  if (stats_.restored > 0 || stats_.spool_errors > 0) {
    Logger()->info("spool {}: {} samples not yet acknowledged restored ({} unreadable lines)", path,
                   stats_.restored, stats_.spool_errors);
  }
  return absl::OkStatus();
}

absl::Status SampleForwarder::CompactSpoolLocked() {
  const std::string& path = options_.spool_path;
  const std::string tmp = path + ".tmp";
  std::string data = absl::StrCat(kSpoolHeader, "\n");
  for (const auto& [key, step] : high_water_) {
    v1::Sample mark;
    mark.set_job_id(key.first);
    mark.set_worker_id(key.second);
    mark.set_step(step);
    data += Encode('H', mark);
  }
  for (const Pending& p : pending_) data += Encode('S', p.sample);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("spool = \"", path, "\": cannot write ", tmp, ": ", std::strerror(errno)));
  }
  const bool written = launcher::WriteAll(fd, data) && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int why = written ? errno : saved;
    ::unlink(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("spool = \"", path, "\": cannot write it: ", std::strerror(why)));
  }
  if (spool_fd_ >= 0) ::close(spool_fd_);
  spool_fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (spool_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("spool = \"", path, "\": cannot open it: ", std::strerror(errno)));
  }
  spool_samples_ = pending_.size();
  spool_acked_ = 0;
  return absl::OkStatus();
}

void SampleForwarder::AppendSpoolLocked(const std::string& line) {
  if (options_.spool_path.empty()) return;
  // A spool that missed a line no longer lines up with pending_: the next compaction (which runs
  // after the next acknowledgement) rewrites it from memory.
  if (spool_fd_ < 0 || !launcher::WriteAll(spool_fd_, line)) {
    if (stats_.spool_errors++ == 0) {
      Logger()->error("spool {}: write failed ({}); samples are kept in memory",
                      options_.spool_path, std::strerror(errno));
    }
    if (spool_fd_ >= 0) ::close(spool_fd_);
    spool_fd_ = -1;
  }
}

bool SampleForwarder::IsDuplicateLocked(const v1::Sample& sample) {
  if (sample.step() == 0) return false;  // no step, no key: nothing to deduplicate on
  auto [it, added] = high_water_.emplace(KeyOf(sample), sample.step());
  if (added) return false;
  if (sample.step() <= it->second) return true;
  it->second = sample.step();
  return false;
}

AddOutcome SampleForwarder::Add(v1::Sample sample) {
  std::unique_lock<std::mutex> lock(mu_);
  if (pending_.size() >= options_.max_pending) {
    if (stats_.dropped++ == 0) {
      Logger()->error("{} samples wait for the profiler: dropping new ones until it answers",
                      pending_.size());
    }
    return AddOutcome::kDropped;
  }
  // The step is checked against the highest one queued (not just sent), so a high-water mark
  // only moves for samples that will be sent.
  const auto key = KeyOf(sample);
  const auto before = high_water_.find(key);
  const int64_t previous = before == high_water_.end() ? 0 : before->second;
  if (IsDuplicateLocked(sample)) {
    ++stats_.duplicates;
    if (logged_ < options_.max_logged) {
      ++logged_;
      Logger()->warn("sample of job {} worker {} step {} not sent: step {} was already reported",
                     sample.job_id(), sample.worker_id(), sample.step(), previous);
    }
    return AddOutcome::kDuplicate;
  }
  ++stats_.queued;
  if (sink_ == nullptr) return AddOutcome::kQueued;
  if (spool_fd_ >= 0) {
    AppendSpoolLocked(Encode('S', sample));
    if (spool_fd_ >= 0) ++spool_samples_;
  }
  const bool wake =
      pending_.empty() || pending_.size() + 1 >= static_cast<size_t>(options_.max_batch);
  pending_.push_back({std::move(sample), Clock::now()});
  stats_.pending = pending_.size();
  lock.unlock();
  if (wake) cv_.notify_all();
  return AddOutcome::kQueued;
}

bool SampleForwarder::Flush(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (sink_ == nullptr) return true;
  ++flushing_;
  cv_.notify_all();
  idle_cv_.wait_for(lock, absl::ToChronoNanoseconds(std::max(timeout, absl::ZeroDuration())),
                    [this] { return pending_.empty() || stopping_; });
  --flushing_;
  return pending_.empty();
}

void SampleForwarder::Close(absl::Duration timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
  }
  if (sink_ == nullptr) return;
  Flush(timeout);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  sink_->Cancel();
  cv_.notify_all();
  idle_cv_.notify_all();
  if (sender_.joinable()) sender_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (spool_fd_ >= 0) ::close(spool_fd_);
  spool_fd_ = -1;
}

SampleForwarderStats SampleForwarder::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void SampleForwarder::SendLoop() {
  auto logger = Logger();
  std::unique_lock<std::mutex> lock(mu_);
  base::Backoff backoff(backoff_policy_);
  absl::Duration backoff_wait = absl::ZeroDuration();
  Clock::time_point failed_at{};
  uint64_t failures_in_row = 0;
  while (!stopping_) {
    if (pending_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const auto now = Clock::now();
    Clock::time_point due = pending_.front().queued_at + ToChrono(options_.batch_interval);
    if (flushing_ > 0 || pending_.size() >= static_cast<size_t>(options_.max_batch)) due = now;
    if (failures_in_row > 0) {
      // While someone waits for a flush the retries come at the shortest backoff.
      const absl::Duration wait = flushing_ > 0 ? options_.backoff_initial : backoff_wait;
      due = std::max(due, failed_at + ToChrono(wait));
    }
    if (due > now) {
      cv_.wait_until(lock, due);
      continue;
    }
    const size_t n = std::min(pending_.size(), static_cast<size_t>(options_.max_batch));
    std::vector<v1::Sample> batch;
    batch.reserve(n);
    for (size_t i = 0; i < n; ++i) batch.push_back(pending_[i].sample);
    lock.unlock();
    absl::StatusOr<SinkReply> reply = sink_->Send(batch);
    lock.lock();
    if (!reply.ok()) {
      ++stats_.failed_sends;
      backoff_wait = backoff.Failed().value_or(options_.backoff_max);
      failed_at = Clock::now();
      if (failures_in_row++ == 0 && !stopping_) {
        logger->warn(
            "profiler did not take {} samples ({}); they stay in the spool and are retried "
            "with backoff",
            n, std::string(reply.status().message()));
      }
      continue;
    }
    // Acknowledged: never sent again. The mark goes to the spool before the next batch.
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
    stats_.pending = pending_.size();
    stats_.acknowledged += n;
    stats_.batches += 1;
    stats_.rejected += reply->rejected;
    if (failures_in_row > 0) {
      logger->info("profiler answers again after {} failed attempts; {} samples still to send",
                   failures_in_row, pending_.size());
    }
    failures_in_row = 0;
    backoff.Succeeded();
    for (const std::string& e : reply->errors) {
      if (logged_ >= options_.max_logged) break;
      ++logged_;
      logger->warn("profiler rejected a sample: {}", e);
    }
    if (!options_.spool_path.empty()) {
      spool_acked_ += n;
      if (spool_fd_ >= 0) AppendSpoolLocked(absl::StrCat("A ", spool_acked_, "\n"));
      if (spool_fd_ < 0 || spool_acked_ > spool_samples_ ||
          (spool_acked_ >= kCompactAfter && spool_acked_ >= pending_.size())) {
        if (absl::Status s = CompactSpoolLocked(); !s.ok()) {
          if (stats_.spool_errors++ == 0) logger->error("{}", std::string(s.message()));
        }
      }
    }
    if (pending_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace spotdnn::services
