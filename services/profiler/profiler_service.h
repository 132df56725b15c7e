// gRPC adapter of the profiler: spotdnn.v1.Profiler over a ProfileStore.
#ifndef SPOTDNN_SERVICES_PROFILER_PROFILER_SERVICE_H_
#define SPOTDNN_SERVICES_PROFILER_PROFILER_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/support/byte_buffer.h"
#include "profiler/fitting.h"
#include "profiler/import_roots.h"
#include "profiler/importers.h"
#include "profiler/profile_store.h"
#include "profiler/sample.h"
#include "services/profiler/sample_convert.h"
#include "spotdnn/v1/profiler.grpc.pb.h"

namespace spotdnn::services {

namespace pb = ::spotdnn::v1;

// Samples a ReportSamples stream stores per transaction.
inline constexpr int kReportBatch = 8192;
// Rejections a ReportSamplesResponse lists (the count is always exact).
inline constexpr int kMaxReportedErrors = 20;
// Most samples one FitProfile call fits (its jobs' samples, or every sample stored); the most
// each of ValidateProfile's fit and check sets may hold.
inline constexpr std::int64_t kMaxFitSamples = 1'000'000;
// Longest an import error line is answered (longer ones are cut).
inline constexpr size_t kMaxImportErrorBytes = 512;

// How the profiler bounds what a call may read and do.
struct ProfilerOptions {
  // Where ImportLog may read a path (--import_root); none: content must be sent.
  profiler::ImportRoots import_roots;
  // In-process use by the CLI, whose caller is this process: any path it can read, links
  // followed (import_roots is then not consulted).
  bool import_any_path = false;
  // Most bytes one import reads: its content, or the files under its path (--max_import_bytes).
  std::uint64_t max_import_bytes = std::uint64_t{64} << 20;
  // Most log files one folder import reads.
  int max_import_files = 10'000;
  // Longest one import may run, whatever the call's deadline (checked between files).
  absl::Duration max_call_time = absl::Seconds(60);
  // Longest one FitProfile or ValidateProfile may run, whatever the call's deadline (a fit of a
  // million samples takes minutes).
  absl::Duration max_fit_time = absl::Minutes(10);
};

// `base` with what `fit` determined written over it (compute entries replace those of the same
// instance or GPU type; all of them when the fit's compute is complete or its variant is not the
// base's), the fit's variant and shared-ps model included.
pb::WorkloadProfile MergeFit(const pb::WorkloadProfile& base, const profiler::WorkloadFit& fit);

// The profiler service. ReportSamples reads its stream as raw messages and parses each itself, so
// that one that cannot be parsed is counted and answered INVALID_ARGUMENT instead of ending the
// stream as if it were complete (gRPC's sync server would).
class ProfilerServiceImpl final : public pb::Profiler::Service {
 public:
  explicit ProfilerServiceImpl(std::shared_ptr<profiler::ProfileStore> store,
                               ProfilerOptions options = {});

  // Serves ReportSamples: every message is parsed as a Sample, validated and stored (a resend is
  // counted in `duplicates`, not stored twice). OK with the counts, or INVALID_ARGUMENT naming the
  // first message that could not be parsed and counting the others, when any could not be.
  grpc::Status ReportSamplesRaw(grpc::ServerContext* context,
                                grpc::ServerReader<grpc::ByteBuffer>* reader,
                                pb::ReportSamplesResponse* response);
  grpc::Status ImportLog(grpc::ServerContext* context, const pb::ImportLogRequest* request,
                         pb::ImportLogResponse* response) override;
  grpc::Status FitProfile(grpc::ServerContext* context, const pb::FitProfileRequest* request,
                          pb::FitProfileResponse* response) override;
  grpc::Status GetProfile(grpc::ServerContext* context, const pb::GetProfileRequest* request,
                          pb::WorkloadProfile* response) override;
  grpc::Status ListProfiles(grpc::ServerContext* context, const pb::ListProfilesRequest* request,
                            pb::ListProfilesResponse* response) override;
  grpc::Status DeleteProfile(grpc::ServerContext* context, const pb::DeleteProfileRequest* request,
                             pb::DeleteProfileResponse* response) override;
  grpc::Status PutProfile(grpc::ServerContext* context, const pb::WorkloadProfile* request,
                          pb::WorkloadProfile* response) override;
  grpc::Status GetJobProgress(grpc::ServerContext* context,
                              const pb::GetJobProgressRequest* request,
                              pb::GetJobProgressResponse* response) override;
  grpc::Status ValidateProfile(grpc::ServerContext* context,
                               const pb::ValidateProfileRequest* request,
                               pb::ValidateProfileResponse* response) override;

 private:
  // The samples of `jobs` (every job when empty; a job id also names its runs "J/..."). NOT_FOUND
  // names `field`[i] when a job has no samples; INVALID_ARGUMENT names `field` when they hold
  // more than kMaxFitSamples (counted before they are read).
  absl::StatusOr<std::vector<profiler::Sample>> LoadJobs(
      const google::protobuf::RepeatedPtrField<std::string>& jobs, absl::string_view field);
  // Stores `profile` as the next version of its name; returns it with the version set.
  absl::StatusOr<pb::WorkloadProfile> Store(pb::WorkloadProfile profile);

  std::shared_ptr<profiler::ProfileStore> store_;
  const ProfilerOptions options_;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_PROFILER_PROFILER_SERVICE_H_
