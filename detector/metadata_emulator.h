// A metadata-service emulator for AWS (IMDSv2), Google Cloud and Azure (Scheduled Events) on a
// local HTTP port. Every instance has its own endpoint, http://HOST:PORT/i/INSTANCE_ID, under
// which each cloud's exact paths answer (paths without the /i/ prefix speak for instance "").
// Notices are scheduled per instance and appear at their time; faults can be injected.
// Azure: /metadata/instance/compute answers the instance's name (its id; "vm-emulated" for
// instance ""), and each event's Resources name the instance it was scheduled for. An Azure
// notice scheduled with all_instances shows in every instance's Scheduled Events, as Azure shows
// an event to every VM of an availability set or scale-set placement group.
//
// Control routes (for the emulator binary and scripts), all under /emulator/:
//   POST /emulator/notice?instance=I&cloud=aws|gce|azure&kind=notice|rebalance|maintenance
//        &action=A&in_ms=N&effective_in_ms=M   (or at_ms=UNIX_MS instead of in_ms)
//        &all_instances=true   (Azure: every instance's document shows it)
//   POST /emulator/fault?instance=I&fault=none|500|401|garbage|truncated|slow&slow_ms=N
//        &path=P   (optional: only that metadata path, e.g. /latest/meta-data/spot/instance-action)
//   POST /emulator/clear?instance=I
#ifndef SPOTDNN_DETECTOR_METADATA_EMULATOR_H_
#define SPOTDNN_DETECTOR_METADATA_EMULATOR_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "detector/types.h"

namespace httplib {
class Server;
class Request;
class Response;
}  // namespace httplib

namespace spotdnn::detector {

// A notice the emulator will show for one instance.
struct EmulatedNotice {
  Cloud cloud = Cloud::kAws;
  // kNotice (AWS instance-action, GCE preempted, Azure Preempt), kRebalance (AWS), kMaintenance
  // (GCE maintenance-event, Azure Reboot/Redeploy/Freeze).
  EventKind kind = EventKind::kNotice;
  // AWS: terminate|stop|hibernate; GCE maintenance: TERMINATE_ON_HOST_MAINTENANCE|
  // MIGRATE_ON_HOST_MAINTENANCE; Azure: the EventType. Empty: the cloud's usual one.
  std::string action;
  int64_t visible_at_unix_ms = 0;  // when the metadata service starts showing it (0 = now)
  int64_t effective_unix_ms = 0;   // AWS "time", Azure NotBefore (0 = visible + 2 min / 30 s)
  // Azure: shown in the Scheduled Events of every instance of the emulator (one availability
  // set), its Resources still naming only the instance it is scheduled for; any of them may
  // acknowledge it.
  bool azure_all_instances = false;
};

// The Azure VM name (IMDS compute.name, and an event's Resources) of an emulated instance.
std::string EmulatedAzureVmName(const std::string& instance_id);

// A fault injected into every metadata answer of one instance.
enum class EmulatorFault {
  kNone,
  kServerError,   // 500
  kUnauthorized,  // 401 on every data request, however fresh the token (AWS)
  kGarbage,       // 200 with a body that is not what the cloud sends (not the AWS token)
  kTruncated,     // 200 with the real body cut in half (not the AWS token)
  kSlow,          // the real answer after slow_ms (or as soon as the fault is lifted)
};

// Parses "none", "500", "401", "garbage", "truncated", "slow".
absl::StatusOr<EmulatorFault> ParseEmulatorFault(std::string_view text);

// What one instance's metadata service was asked.
struct EmulatorStats {
  int requests = 0;                     // every metadata request
  int token_requests = 0;               // AWS PUT /latest/api/token answered 200
  int unauthorized = 0;                 // AWS 401 answers
  std::vector<std::string> azure_acks;  // EventIds acknowledged with StartRequests
};

// The emulator. Thread-safe.
class MetadataEmulator {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;      // 0 = any free port
    int threads = 64;  // HTTP worker threads (each open connection or long poll holds one)
    bool keep_alive = true;
    // The wall clock notices are scheduled on and answers are dated by; null: the real clock.
    // Long polls and slow answers wait in real time. Outlives the emulator.
    base::Clock* clock = nullptr;
    // Longest a GCE long poll (wait_for_change) is held before it answers the unchanged value, as
    // when its timeout_sec runs out; zero: timeout_sec alone (whole seconds, 60 by default).
    // Tests shorten it to see rounds after a value stopped changing without waiting seconds.
    absl::Duration max_long_poll = absl::ZeroDuration();
  };

  // Binds and starts serving. UNAVAILABLE naming the address when it cannot be bound, as when
  // another server listens there (the port is never shared: no SO_REUSEPORT).
  static absl::StatusOr<std::unique_ptr<MetadataEmulator>> Start(const Options& options);
  ~MetadataEmulator();
  MetadataEmulator(const MetadataEmulator&) = delete;
  MetadataEmulator& operator=(const MetadataEmulator&) = delete;

  // Stops serving and wakes long polls. Idempotent.
  void Stop();

  int port() const { return port_; }
  // The metadata endpoint of `instance_id`: http://HOST:PORT/i/INSTANCE_ID.
  std::string EndpointFor(const std::string& instance_id) const;

  // Schedules a notice for an instance.
  void ScheduleNotice(const std::string& instance_id, EmulatedNotice notice);
  // Removes an instance's notices (AWS 404s again, GCE FALSE/NONE, Azure no events).
  void ClearNotices(const std::string& instance_id);
  // Injects a fault into an instance's answers (kNone removes it): into every metadata path, or
  // only into `path` (e.g. "/latest/meta-data/events/recommendations/rebalance") when given.
  void SetFault(const std::string& instance_id, EmulatorFault fault, int slow_ms = 0,
                const std::string& path = "");
  // Invalidates every AWS token issued for an instance (the next request gets 401).
  void ExpireTokens(const std::string& instance_id);
  // What the instance's metadata service was asked so far.
  EmulatorStats Stats(const std::string& instance_id) const;

 private:
  struct Instance;
  explicit MetadataEmulator(const Options& options);

  void Handle(const httplib::Request& request, httplib::Response& response);
  void HandleControl(const httplib::Request& request, httplib::Response& response);
  void HandleAws(Instance& instance, const std::string& path, const httplib::Request& request,
                 httplib::Response& response, std::unique_lock<std::mutex>& lock);
  void HandleGce(Instance& instance, const std::string& instance_id, const std::string& path,
                 const httplib::Request& request, httplib::Response& response,
                 std::unique_lock<std::mutex>& lock);
  void HandleAzure(Instance& instance, const std::string& instance_id, const std::string& path,
                   const httplib::Request& request, httplib::Response& response);
  Instance& InstanceLocked(const std::string& instance_id);

  Options options_;
  base::Clock* clock_;  // options_.clock or the real clock
  int port_ = 0;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  bool stopping_ = false;
  std::map<std::string, std::unique_ptr<Instance>> instances_;
  uint64_t next_token_ = 1;
  uint64_t next_event_ = 1;
  int clears_ = 0;  // ClearNotices calls (each changes some Azure document)
};

}  // namespace spotdnn::detector

#endif  // SPOTDNN_DETECTOR_METADATA_EMULATOR_H_
