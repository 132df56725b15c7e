// Spot revocations of local instances: the notice on the metadata emulator, the stop at the
// notice's end, and the spot capacity (fixed or replayed from a trace) that revokes the newest.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "provisioner/launcher/http.h"
#include "provisioner/launcher/local_provider.h"
#include "provisioner/launcher/local_provider_record.h"
#include "provisioner/launcher/sigv4.h"

namespace spotdnn::launcher {

namespace fs = std::filesystem;

EmulatorMetadataClient::EmulatorMetadataClient(std::string base_url)
    : base_url_(std::move(base_url)) {
  while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
}

std::string EmulatorMetadataClient::EndpointFor(const std::string& instance_id) const {
  return absl::StrCat(base_url_, "/i/", instance_id);
}

absl::Status EmulatorMetadataClient::PublishSpotNotice(const std::string& instance_id,
                                                       absl::Time action_time) {
  int64_t effective_ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(action_time - absl::Now()));
  std::string url = absl::StrCat(
      base_url_, "/emulator/notice?instance=", UriEncode(instance_id, false),
      "&cloud=aws&kind=notice&action=terminate&in_ms=0&effective_in_ms=", effective_ms);
  absl::StatusOr<HttpResponse> response =
      HttpSend({.method = "POST", .url = url, .timeout = absl::Seconds(5)});
  if (!response.ok()) {
    return absl::UnavailableError(absl::StrCat("metadata emulator at ", base_url_,
                                               " is not reachable: ", response.status().message()));
  }
  if (response->status != 200) {
    return absl::UnavailableError(absl::StrCat("metadata emulator at ", base_url_,
                                               " refused the notice for ", instance_id, ": HTTP ",
                                               response->status, " ", response->body));
  }
  return absl::OkStatus();
}

std::string CapacityTraceOriginPath(const std::string& state_dir, const std::string& job) {
  return (fs::path(state_dir) /
          (job.empty() ? std::string("capacity_trace_origin") : "capacity_trace_origin." + job))
      .string();
}

absl::Status LocalProvider::Revoke(const std::string& instance_id, absl::Duration notice) {
  absl::StatusOr<Record> record = Load(instance_id);
  if (!record.ok()) return record.status();
  if (record->terminated || !Alive(*record)) {
    return absl::FailedPreconditionError(absl::StrCat("instance ", instance_id, " is not running"));
  }
  if (record->market == Market::kOnDemand) {
    return absl::FailedPreconditionError(absl::StrCat(
        "instance ", instance_id, " is on-demand: on-demand instances are not revoked"));
  }
  if (notice < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("notice = ", absl::FormatDuration(notice), ": must be >= 0"));
  }
  return RevokeRecord(*std::move(record), notice);
}

absl::Status LocalProvider::RevokeRecord(Record record, absl::Duration notice) {
  const std::string instance_id = record.id;
  absl::Time action_time = absl::Now() + notice;
  std::shared_ptr<LocalMetadataService> metadata = options_.metadata;
  if (metadata == nullptr && !record.metadata_control.empty()) {
    metadata = std::make_shared<EmulatorMetadataClient>(record.metadata_control);
  }
  if (metadata != nullptr) {
    if (absl::Status s = metadata->PublishSpotNotice(instance_id, action_time); !s.ok()) return s;
  } else if (!options_.allow_revoke_without_metadata) {
    return absl::FailedPreconditionError(absl::StrCat(
        "instance ", instance_id, " has no metadata endpoint to publish the notice on"));
  }
  // On record, so that a process after this one stops it if this one is gone by then.
  record.revoke_unix_ms = absl::ToUnixMillis(action_time);
  if (absl::Status s = Save(record); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  ++pending_revocations_;
  revoking_here_.insert(record.id);
  revokers_.emplace_back([this, r = record, action_time]() mutable {
    {
      std::unique_lock<std::mutex> wait_lock(mu_);
      revocations_done_.wait_until(wait_lock, absl::ToChronoTime(action_time),
                                   [this] { return shutting_down_; });
    }
    Stop(r);
    r.terminated = true;
    r.end_unix_ms = absl::ToUnixMillis(absl::Now());
    // Terminate() may have removed the file meanwhile: nothing to write then.
    if (std::filesystem::exists(PathFor(r.id, ".instance"))) (void)Save(r);
    std::lock_guard<std::mutex> done_lock(mu_);
    --pending_revocations_;
    revocations_done_.notify_all();
  });
  return absl::OkStatus();
}

double LocalProvider::TraceTimeNow() const {
  return absl::ToDoubleSeconds(absl::Now() - options_.capacity_trace_origin) *
         options_.capacity_trace_time_scale;
}

std::vector<std::string> LocalProvider::ZonesOf(const std::string& instance_type) const {
  std::vector<std::string> zones;
  const std::string prefix = instance_type + "@";
  for (const auto& [key, trace] : options_.capacity_trace) {
    if (absl::StartsWith(key, prefix)) zones.push_back(key.substr(prefix.size()));
  }
  return zones;
}

int LocalProvider::SpotCapacityNow(const std::string& instance_type, const std::string& zone) {
  int capacity = -1;
  if (auto cap = options_.capacity.find(instance_type); cap != options_.capacity.end()) {
    capacity = cap->second;
  }
  // A zone without a trace of its own (a label the caller gave) shares the type's.
  auto trace = options_.capacity_trace.find(absl::StrCat(instance_type, "@", zone));
  if (zone.empty() || trace == options_.capacity_trace.end()) {
    trace = options_.capacity_trace.find(instance_type);
  }
  if (trace != options_.capacity_trace.end()) {
    const int count = trace->second.CountAt(TraceTimeNow());
    capacity = capacity < 0 ? count : std::min(capacity, count);
  }
  return capacity;
}

absl::Status LocalProvider::ApplyCapacityTrace() {
  if (options_.capacity_trace.empty() || !options_.owner) return absl::OkStatus();
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  // (type, zone) -> running spot, not revoked
  std::map<std::pair<std::string, std::string>, std::vector<Record>> spot;
  for (Record& r : LoadAll()) {
    if (r.terminated || r.market != Market::kSpot) continue;
    if (r.revoke_unix_ms > 0) {
      // Revoked by a process that is gone (its stop thread with it): stop it now.
      bool scheduled_here;
      {
        std::lock_guard<std::mutex> lock(mu_);
        scheduled_here = revoking_here_.count(r.id) > 0;
      }
      if (!scheduled_here && r.revoke_unix_ms <= now_ms && Alive(r)) {
        Stop(r);
        r.terminated = true;
        r.end_unix_ms = now_ms;
        if (absl::Status s = Save(r); !s.ok()) return s;
      }
      continue;
    }
    // Counted against its zone's trace, or (a zone without one) the type's.
    const bool zoned = !r.zone.empty() && options_.capacity_trace.count(
                                              absl::StrCat(r.instance_type, "@", r.zone)) > 0;
    if ((zoned || options_.capacity_trace.count(r.instance_type) > 0) && Alive(r)) {
      const std::string zone = zoned ? r.zone : "";
      spot[{r.instance_type, zone}].push_back(std::move(r));
    }
  }
  for (auto& [type_zone, running] : spot) {
    const int capacity = std::max(0, SpotCapacityNow(type_zone.first, type_zone.second));
    if (static_cast<int>(running.size()) <= capacity) continue;
    // The newest go first.
    std::sort(running.begin(), running.end(), [](const Record& a, const Record& b) {
      return std::tie(a.launch_unix_ms, a.id) > std::tie(b.launch_unix_ms, b.id);
    });
    for (size_t i = 0; i < running.size() - static_cast<size_t>(capacity); ++i) {
      if (absl::Status s = RevokeRecord(running[i], options_.trace_notice); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

void LocalProvider::WaitForRevocations() {
  std::unique_lock<std::mutex> lock(mu_);
  revocations_done_.wait(lock, [this] { return pending_revocations_ == 0; });
}

}  // namespace spotdnn::launcher
