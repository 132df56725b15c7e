// gRPC adapter of the profiler: spotdnn.v1.Profiler over a ProfileStore.
#ifndef SPOTDNN_SERVICES_PROFILER_PROFILER_SERVICE_H_
#define SPOTDNN_SERVICES_PROFILER_PROFILER_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "profiler/fitting.h"
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

// `base` with what `fit` determined written over it (compute entries replace those of the same
// instance or GPU type; all of them when the fit's compute is complete or its variant is not the
// base's), the fit's variant and shared-ps model included.
pb::WorkloadProfile MergeFit(const pb::WorkloadProfile& base, const profiler::WorkloadFit& fit);

class ProfilerServiceImpl final : public pb::Profiler::Service {
 public:
  explicit ProfilerServiceImpl(std::shared_ptr<profiler::ProfileStore> store);

  grpc::Status ReportSamples(grpc::ServerContext* context, grpc::ServerReader<pb::Sample>* reader,
                             pb::ReportSamplesResponse* response) override;
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
  // names `field`[i] when a job has no samples.
  absl::StatusOr<std::vector<profiler::Sample>> LoadJobs(
      const google::protobuf::RepeatedPtrField<std::string>& jobs, absl::string_view field);
  // Stores `profile` as the next version of its name; returns it with the version set.
  absl::StatusOr<pb::WorkloadProfile> Store(pb::WorkloadProfile profile);

  std::shared_ptr<profiler::ProfileStore> store_;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_PROFILER_PROFILER_SERVICE_H_
