// The Profiler service: samples reported and logs imported, the stored profiles (get, list,
// put, delete) and a job's progress; the fits are in profile_fit.cc.
#include "services/profiler/profiler_service.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/limits.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/method_handler.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "predictor/types.h"
#include "profiler/cluster_fit.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"
#include "services/common/request_check.h"
#include "services/common/request_size.h"
#include "services/common/server.h"

namespace spotdnn::services {
namespace {

profiler::LogFormat ToDomain(pb::LogFormat format) {
  switch (format) {
    case pb::LOG_FORMAT_TENSORBOARD_CSV:
      return profiler::LogFormat::kTensorBoardCsv;
    case pb::LOG_FORMAT_SPOTDNN_WORKER:
      return profiler::LogFormat::kSpotdnnWorker;
    case pb::LOG_FORMAT_CSV:
      return profiler::LogFormat::kCsv;
    case pb::LOG_FORMAT_SAMPLE_LINES:
      return profiler::LogFormat::kSampleLines;
    default:
      return profiler::LogFormat::kAuto;
  }
}

// Parses one message of a stream read raw; false when it is not a valid `message`.
bool Parse(grpc::ByteBuffer& buffer, google::protobuf::Message* message) {
  grpc::ProtoBufferReader reader(&buffer);
  return reader.status().ok() && message->ParseFromZeroCopyStream(&reader);
}

// An import error line from a server-side file, without the file's content: every quoted part
// after "file:line: " becomes "…" (a line of /etc/shadow must not come back in an error).
std::string WithoutContent(absl::string_view error) {
  // The reason starts after the first ":<digits>: ".
  size_t reason = absl::string_view::npos;
  for (size_t colon = error.find(':'); colon != absl::string_view::npos;
       colon = error.find(':', colon + 1)) {
    size_t digits = colon + 1;
    while (digits < error.size() && std::isdigit(static_cast<unsigned char>(error[digits]))) {
      ++digits;
    }
    if (digits > colon + 1 && error.substr(digits, 2) == ": ") {
      reason = digits + 2;
      break;
    }
  }
  if (reason == absl::string_view::npos) return std::string(error);
  std::string out(error.substr(0, reason));
  bool quoted = false;
  for (char c : error.substr(reason)) {
    if (c == '"') {
      out += quoted ? "\xE2\x80\xA6\"" : "\"";
      quoted = !quoted;
    } else if (!quoted) {
      out += c;
    }
  }
  if (quoted) out += "\xE2\x80\xA6\"";
  return out;
}

}  // namespace

ProfilerServiceImpl::ProfilerServiceImpl(std::shared_ptr<profiler::ProfileStore> store,
                                         ProfilerOptions options)
    : store_(std::move(store)), options_(std::move(options)) {
  // ReportSamples reads raw messages (see the class comment). The handler stays a client stream
  // on the wire; gRPC's server only needs it to be one that does not read a message up front.
  const google::protobuf::MethodDescriptor* method =
      google::protobuf::DescriptorPool::generated_pool()
          ->FindServiceByName(pb::Profiler::service_full_name())
          ->FindMethodByName("ReportSamples");
  MarkMethodStreamed(
      method->index(),
      new grpc::internal::ClientStreamingHandler<ProfilerServiceImpl, grpc::ByteBuffer,
                                                 pb::ReportSamplesResponse>(
          [](ProfilerServiceImpl* self, grpc::ServerContext* context,
             grpc::ServerReader<grpc::ByteBuffer>* reader, pb::ReportSamplesResponse* response) {
            return self->ReportSamplesRaw(context, reader, response);
          },
          this));
  // The other methods refuse a request larger than their limits allow before parsing it; an
  // import carries its content, up to --max_import_bytes.
  const size_t import_limit = static_cast<size_t>(std::min<std::uint64_t>(
      options_.max_import_bytes + (1u << 20), static_cast<std::uint64_t>(kMaxMessageBytes)));
  for (auto [index, handler] :
       RequestSizeLimits<pb::Profiler::Service>(this, pb::Profiler::service_full_name())
           .Unary("ImportLog", &pb::Profiler::Service::ImportLog, import_limit)
           .Unary("FitProfile", &pb::Profiler::Service::FitProfile)
           .Unary("GetProfile", &pb::Profiler::Service::GetProfile)
           .Unary("ListProfiles", &pb::Profiler::Service::ListProfiles)
           .Unary("DeleteProfile", &pb::Profiler::Service::DeleteProfile)
           .Unary("PutProfile", &pb::Profiler::Service::PutProfile)
           .Unary("GetJobProgress", &pb::Profiler::Service::GetJobProgress)
           .Unary("ValidateProfile", &pb::Profiler::Service::ValidateProfile)
           .Take()) {
    MarkMethodStreamed(index, handler);
  }
}

grpc::Status ProfilerServiceImpl::ReportSamplesRaw(grpc::ServerContext* context,
                                                   grpc::ServerReader<grpc::ByteBuffer>* reader,
                                                   pb::ReportSamplesResponse* response) {
  profiler::StepOrderChecker order;
  std::vector<profiler::Sample> batch;
  batch.reserve(kReportBatch);
  std::uint64_t index = 0, accepted = 0, stored = 0, rejected = 0, unparsable = 0;
  std::uint64_t first_unparsable = 0;
  auto flush = [&]() -> absl::Status {
    if (batch.empty()) return absl::OkStatus();
    absl::StatusOr<std::uint64_t> added = store_->AddSamples(batch, "grpc");
    if (added.ok()) {
      accepted += batch.size();
      stored += *added;
    }
    batch.clear();
    return added.status();
  };
  auto reject = [&](absl::string_view reason) {
    ++rejected;
    if (response->errors_size() < kMaxReportedErrors) {
      response->add_errors(absl::StrCat("samples[", index, "]: ", reason));
    }
  };
  grpc::ByteBuffer buffer;
  pb::Sample message;
  while (reader->Read(&buffer)) {
    message.Clear();
    if (!Parse(buffer, &message)) {
      if (unparsable++ == 0) first_unparsable = index;
      reject(
          "could not be parsed as a spotdnn.v1.Sample (malformed protobuf bytes, or a string "
          "field that is not valid UTF-8)");
      ++index;
      continue;
    }
    profiler::Sample sample = ToDomain(message);
    absl::Status s = sample.job_id.empty()
                         ? absl::InvalidArgumentError("job_id is empty: every sample names its job")
                         : profiler::ValidateSample(sample);
    if (s.ok()) s = order.Check(sample);
    if (!s.ok()) {
      reject(s.message());
    } else {
      batch.push_back(std::move(sample));
      if (batch.size() >= static_cast<size_t>(kReportBatch)) {
        if (auto f = flush(); !f.ok()) return ToGrpc(f);
      }
    }
    ++index;
  }
  if (auto f = flush(); !f.ok()) return ToGrpc(f);
  response->set_accepted(accepted);
  response->set_rejected(rejected);
  response->set_duplicates(accepted - stored);
  if (stored > (1u << 16)) ReleaseMemorySoon();
  if (unparsable == 0) return grpc::Status::OK;
  // The answer's counts are lost with an error status: they go in the message and, for
  // programs, in trailing metadata.
  context->AddTrailingMetadata("spotdnn-accepted", absl::StrCat(accepted));
  context->AddTrailingMetadata("spotdnn-rejected", absl::StrCat(rejected));
  context->AddTrailingMetadata("spotdnn-duplicates", absl::StrCat(accepted - stored));
  context->AddTrailingMetadata("spotdnn-unparsable", absl::StrCat(unparsable));
  return ToGrpc(absl::InvalidArgumentError(absl::StrFormat(
      "samples[%d] could not be parsed as a spotdnn.v1.Sample (malformed protobuf bytes, or a "
      "string field that is not valid UTF-8); %d of the stream's %d messages could not be "
      "parsed. The others were read: %d accepted (stored; %d of them already were), %d "
      "rejected",
      first_unparsable, unparsable, index, accepted, accepted - stored, rejected - unparsable)));
}

grpc::Status ProfilerServiceImpl::ImportLog(grpc::ServerContext* context,
                                            const pb::ImportLogRequest* request,
                                            pb::ImportLogResponse* response) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  profiler::ImportOptions options;
  options.format = ToDomain(request->format());
  options.job_id = request->job_id();
  options.stop_on_error = request->stop_on_error();
  options.instance_type = request->instance_type();
  options.gpu_type = request->gpu_type();
  options.gpus = request->gpus();
  options.batch_size = request->batch_size();
  options.cluster_workers = request->cluster_workers();
  options.parameter_servers = request->parameter_servers();
  options.cluster = request->cluster();
  for (const auto& [field, value, most] :
       {std::tuple<const char*, int, int>{"cluster_workers", request->cluster_workers(),
                                          predictor::kMaxClusterSize},
        {"gpus", request->gpus(), predictor::kMaxGpusPerInstance},
        {"batch_size", request->batch_size(), 1 << 30},
        {"parameter_servers", request->parameter_servers(), predictor::kMaxParameterServers}}) {
    if (value < 0 || value > most) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrFormat(
          "%s = %d: must be in [0, %d] (0 = as the log says)", field, value, most)));
    }
  }
  if (!options.cluster.empty()) {
    auto composition = profiler::ParseComposition(options.cluster);
    if (!composition.ok()) return ToGrpc(composition.status());
    if (!options.instance_type.empty() || !options.gpu_type.empty()) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          "cluster = ", limits::Quote(options.cluster), " and instance_type = ",
          limits::Quote(options.instance_type), ", gpu_type = ", limits::Quote(options.gpu_type),
          ": a composition names the types itself; give one or the other")));
    }
    int total = 0;
    for (const auto& [type, n] : *composition) total += n;
    if (options.cluster_workers != 0 && options.cluster_workers != total) {
      return ToGrpc(absl::InvalidArgumentError(
          absl::StrCat("cluster_workers = ", options.cluster_workers, ": cluster ",
                       limits::Quote(options.cluster), " has ", total, " workers")));
    }
    options.cluster_workers = total;
    options.cluster = profiler::CompositionText(*composition);
  }
  if (request->content().size() > options_.max_import_bytes) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrFormat(
        "content: %d bytes, above the server's import limit of %d bytes (--max_import_bytes); "
        "split the log",
        request->content().size(), options_.max_import_bytes)));
  }
  // Errors from files the server read say where, not what: their content is not the caller's.
  const bool server_files = request->content().empty() && !options_.import_any_path;
  absl::StatusOr<profiler::ImportResult> result;
  if (!request->content().empty()) {
    if (options.job_id.empty()) {
      return ToGrpc(absl::InvalidArgumentError(
          "job_id is empty: content sent inline needs the job it belongs to"));
    }
    result = profiler::ImportText(request->content(),
                                  request->path().empty() ? "content" : request->path(), options);
  } else if (!request->path().empty()) {
    profiler::FileAccess access;
    access.max_bytes = options_.max_import_bytes;
    access.max_files = options_.max_import_files;
    access.stop =
        CallStopCheck(context, options_.max_call_time, "the import", "the server's call limit");
    std::string path = request->path();
    if (!options_.import_any_path) {
      auto resolved = options_.import_roots.Resolve(path);
      if (!resolved.ok()) return ToGrpc(resolved.status());
      path = *std::move(resolved);
      access.follow_symlinks = false;
    }
    result = profiler::ImportPath(path, options, access);
  } else {
    return ToGrpc(absl::InvalidArgumentError("set path (a file or folder) or content"));
  }
  if (!result.ok()) {
    const absl::Status& s = result.status();
    return ToGrpc(absl::Status(
        s.code(), server_files ? WithoutContent(s.message()) : std::string(s.message())));
  }
  for (profiler::Sample& s : result->samples) {
    if (s.job_id.empty()) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat("job_id is empty and the log (",
                                                            limits::Quote(request->path()),
                                                            ") names no job: set job_id")));
    }
  }
  // One transaction: an import that fails part-way stores nothing.
  auto stored =
      store_->AddSamples(result->samples, request->path().empty() ? "content" : request->path());
  if (!stored.ok()) return ToGrpc(stored.status());
  response->set_imported(result->samples.size());
  response->set_duplicates(result->samples.size() - *stored);
  response->set_skipped(result->skipped);
  response->set_files(result->files);
  for (const std::string& e : result->errors) {
    response->add_errors(
        limits::ValidUtf8(server_files ? WithoutContent(e) : e, kMaxImportErrorBytes));
  }
  std::set<std::string> runs;
  for (const profiler::Sample& s : result->samples) runs.insert(s.job_id);
  response->set_runs(runs.size());
  for (const std::string& n : result->notes) {
    response->add_notes(
        limits::ValidUtf8(server_files ? WithoutContent(n) : n, kMaxImportErrorBytes));
  }
  if (request->content().size() > (16u << 20) || result->samples.size() > (1u << 16)) {
    ReleaseMemorySoon();
  }
  return grpc::Status::OK;
}

absl::StatusOr<pb::WorkloadProfile> ProfilerServiceImpl::Store(pb::WorkloadProfile profile) {
  // Every way into the store (PutProfile, FitProfile) passes this one check: what a fit did not
  // determine may be 0, every value that is set must be usable.
  if (absl::Status s =
          ToDomain(profile).Validate(predictor::WorkloadProfile::Completeness::kPartial);
      !s.ok()) {
    return s;
  }
  auto version = store_->PutProfile(profile.name(), [&profile](int v) {
    profile.set_version(v);
    return ToJson(profile, /*pretty=*/true);
  });
  if (!version.ok()) return version.status();
  profile.set_version(*version);
  return profile;
}

grpc::Status ProfilerServiceImpl::GetProfile(grpc::ServerContext*,
                                             const pb::GetProfileRequest* request,
                                             pb::WorkloadProfile* response) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  auto stored = store_->GetProfile(request->name(), request->version());
  if (!stored.ok()) return ToGrpc(stored.status());
  return ToGrpc(
      ParseJson(stored->json, absl::StrCat("stored profile ", request->name()), response));
}

grpc::Status ProfilerServiceImpl::ListProfiles(grpc::ServerContext*, const pb::ListProfilesRequest*,
                                               pb::ListProfilesResponse* response) {
  auto stored = store_->ListProfiles();
  if (!stored.ok()) return ToGrpc(stored.status());
  for (const profiler::StoredProfile& p : *stored) {
    if (auto s =
            ParseJson(p.json, absl::StrCat("stored profile ", p.name), response->add_profiles());
        !s.ok()) {
      return ToGrpc(absl::DataLossError(s.message()));
    }
  }
  return grpc::Status::OK;
}

grpc::Status ProfilerServiceImpl::DeleteProfile(grpc::ServerContext*,
                                                const pb::DeleteProfileRequest* request,
                                                pb::DeleteProfileResponse* response) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  auto deleted = store_->DeleteProfile(request->name(), request->version());
  if (!deleted.ok()) return ToGrpc(deleted.status());
  response->set_deleted(*deleted);
  return grpc::Status::OK;
}

grpc::Status ProfilerServiceImpl::PutProfile(grpc::ServerContext*,
                                             const pb::WorkloadProfile* request,
                                             pb::WorkloadProfile* response) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  if (request->name().empty()) {
    return ToGrpc(absl::InvalidArgumentError("name is empty: a profile needs a name"));
  }
  if (auto s = ToDomain(*request).Validate(); !s.ok()) return ToGrpc(s);
  auto stored = Store(*request);
  if (!stored.ok()) return ToGrpc(stored.status());
  *response = *std::move(stored);
  return grpc::Status::OK;
}

grpc::Status ProfilerServiceImpl::GetJobProgress(grpc::ServerContext*,
                                                 const pb::GetJobProgressRequest* request,
                                                 pb::GetJobProgressResponse* response) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  if (request->job_id().empty()) {
    return ToGrpc(absl::InvalidArgumentError("job_id is empty: name the job"));
  }
  auto workers = store_->JobProgress(request->job_id());
  if (!workers.ok()) return ToGrpc(workers.status());
  response->set_job_id(request->job_id());
  std::int64_t total = 0;
  for (const profiler::WorkerProgress& w : *workers) {
    pb::WorkerProgress* out = response->add_workers();
    out->set_worker_id(w.worker_id);
    out->set_instance_type(w.instance_type);
    out->set_steps(w.steps);
    out->set_samples(w.samples);
    out->set_last_wall_time_s(w.last_wall_time_s);
    out->set_last_loss(w.last_loss);
    out->set_first_step(w.first_step);
    out->set_first_wall_time_s(w.first_wall_time_s);
    // Steps are int64 each (a sample may say step 2^63-1): the sum saturates instead of wrapping.
    total = w.steps > std::numeric_limits<std::int64_t>::max() - total
                ? std::numeric_limits<std::int64_t>::max()
                : total + std::max<std::int64_t>(w.steps, 0);
  }
  response->set_total_steps(total);
  return grpc::Status::OK;
}

}  // namespace spotdnn::services
