#include "services/detector/notice_delivery.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "nlohmann/json.hpp"
#include "provisioner/launcher/checkpoint_sync.h"
#include "services/detector/agent_log.h"

namespace spotdnn::services {

std::string NoticeFileJson(const NoticeInfo& notice) {
  nlohmann::ordered_json j;
  j["kind"] = "notice";
  j["action"] = notice.action;
  j["cloud"] = notice.cloud;
  j["instance_id"] = notice.instance_id;
  j["notice_unix_ms"] = notice.notice_unix_ms;
  j["deadline_unix_ms"] = notice.deadline_unix_ms;
  j["deadline"] =
      notice.deadline_unix_ms > 0
          ? absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(notice.deadline_unix_ms),
                             absl::UTCTimeZone())
          : "";
  return j.dump() + "\n";
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view content) {
  return launcher::WriteFileAtomically(path, content);
}

NoticeDelivery::NoticeDelivery(std::string file, int signal, std::string cloud,
                               std::string instance_id)
    : file_(std::move(file)),
      signal_(signal),
      cloud_(std::move(cloud)),
      instance_id_(std::move(instance_id)) {}

void NoticeDelivery::OnNotice(const detector::Notice& n) {
  auto logger = AgentLogger();
  if (n.kind != detector::EventKind::kNotice) {
    logger->info("metadata event {} ({}) is not a revocation notice: not passed to the command",
                 n.action, n.detail);
    return;
  }
  NoticeInfo info{.action = n.action,
                  .cloud = cloud_,
                  .instance_id = instance_id_,
                  .notice_unix_ms = base::RealClock::Get().NowUnixMs(),
                  .deadline_unix_ms = n.effective_unix_ms};
  if (absl::Status s = WriteFileAtomically(file_, NoticeFileJson(info)); !s.ok()) {
    logger->error("notice file: {}", std::string(s.message()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  noticed_ = true;
  const int64_t left = n.effective_unix_ms > 0 ? n.effective_unix_ms - info.notice_unix_ms : 0;
  logger->warn("revocation notice: {} {}; notice file {} written{}", n.action,
               n.effective_unix_ms > 0 ? absl::StrCat("in ", left, " ms") : "(no deadline given)",
               file_,
               signal_ == 0 ? "; no signal (--notice_signal=none)"
                            : absl::StrCat("; signal ", signal_, " to the command"));
  if (command_ != nullptr) SignalLocked();
}
void NoticeDelivery::SetCommand(WrappedCommand* command) {
  std::lock_guard<std::mutex> lock(mu_);
  command_ = command;
  if (noticed_ && command_ != nullptr) SignalLocked();
}
bool NoticeDelivery::noticed() {
  std::lock_guard<std::mutex> lock(mu_);
  return noticed_;
}
void NoticeDelivery::SignalLocked() {
  if (signal_ == 0) return;
  if (absl::Status s = command_->Signal(signal_); !s.ok()) {
    AgentLogger()->warn("notice signal: {}", std::string(s.message()));
  }
}
}  // namespace spotdnn::services
