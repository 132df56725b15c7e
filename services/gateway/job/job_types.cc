#include "services/gateway/job/job_types.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"

namespace spotdnn::job {
namespace {

template <typename E, size_t N>
absl::string_view NameIn(const std::array<std::pair<E, absl::string_view>, N>& names, E value) {
  for (const auto& [v, name] : names) {
    if (v == value) return name;
  }
  return "?";
}

template <typename E, size_t N>
absl::StatusOr<E> ParseIn(const std::array<std::pair<E, absl::string_view>, N>& names,
                          absl::string_view what, absl::string_view text) {
  for (const auto& [v, name] : names) {
    if (name == text) return v;
  }
  return absl::DataLossError(absl::StrCat("the job store holds an unknown ", what, " \"", text,
                                          "\": was it written by a newer spotdnn?"));
}

constexpr std::array<std::pair<JobState, absl::string_view>, 5> kJobStates{{
    {JobState::kProfiling, "profiling"},
    {JobState::kLaunching, "launching"},
    {JobState::kRunning, "running"},
    {JobState::kFinished, "finished"},
    {JobState::kFailed, "failed"},
}};
constexpr std::array<std::pair<InstanceStatus, absl::string_view>, 3> kInstanceStatuses{{
    {InstanceStatus::kRunning, "running"},
    {InstanceStatus::kRevoking, "revoking"},
    {InstanceStatus::kEnded, "ended"},
}};
constexpr std::array<std::pair<LaunchReason, absl::string_view>, 6> kLaunchReasons{{
    {LaunchReason::kPlan, "plan"},
    {LaunchReason::kCapacity, "capacity"},
    {LaunchReason::kTakeover, "takeover"},
    {LaunchReason::kDeadline, "deadline"},
    {LaunchReason::kRefit, "refit"},
    {LaunchReason::kZoneReturn, "zone-return"},
}};
constexpr std::array<std::pair<RevocationStatus, absl::string_view>, 4> kRevocationStatuses{{
    {RevocationStatus::kPending, "pending"},
    {RevocationStatus::kLaunched, "launched"},
    {RevocationStatus::kNoneNeeded, "none-needed"},
    {RevocationStatus::kFailed, "failed"},
}};

}  // namespace

absl::string_view Name(JobState state) { return NameIn(kJobStates, state); }
absl::string_view Name(InstanceStatus status) { return NameIn(kInstanceStatuses, status); }
absl::string_view Name(LaunchReason reason) { return NameIn(kLaunchReasons, reason); }
absl::string_view Name(RevocationStatus status) { return NameIn(kRevocationStatuses, status); }

absl::StatusOr<JobState> ParseJobState(absl::string_view name) {
  return ParseIn(kJobStates, "job state", name);
}
absl::StatusOr<InstanceStatus> ParseInstanceStatus(absl::string_view name) {
  return ParseIn(kInstanceStatuses, "instance state", name);
}
absl::StatusOr<LaunchReason> ParseLaunchReason(absl::string_view name) {
  return ParseIn(kLaunchReasons, "launch reason", name);
}
absl::StatusOr<RevocationStatus> ParseRevocationStatus(absl::string_view name) {
  return ParseIn(kRevocationStatuses, "revocation status", name);
}

}  // namespace spotdnn::job
