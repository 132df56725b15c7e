// spotdnn profile validate: fit on one set of jobs, predict every cluster of another from its
// composition, and compare with what those runs measured.
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "predictor/types.h"
#include "services/common/convert.h"
#include "services/gateway/cli/cli.h"
#include "services/gateway/cli/output.h"

namespace spotdnn::gateway {
namespace {

std::string Composition(const pb::Cluster& cluster) {
  std::vector<std::string> parts;
  for (const pb::InstanceCount& c : cluster.instances()) {
    parts.push_back(absl::StrCat(c.instance_type(), "=", c.count()));
  }
  return absl::StrCat(absl::StrJoin(parts, ","), ", ", cluster.parameter_servers(), " PS");
}

}  // namespace

int ProfileValidateCommand(const Args& args, pb::Profiler::StubInterface& stub, const Io& io) {
  auto fail = [&](const absl::Status& s) { return ReportError(s, "profile validate", io); };
  pb::ValidateProfileRequest request;
  for (const auto& [flag, ids] : {std::pair{"--fit", request.mutable_fit_job_ids()},
                                  std::pair{"--check", request.mutable_check_job_ids()}}) {
    auto value = args.Required(flag);
    if (!value.ok()) return fail(value.status());
    for (absl::string_view j : absl::StrSplit(*value, ',', absl::SkipEmpty())) {
      ids->Add(std::string(j));
    }
    if (ids->empty()) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat(flag, " = \"", *value, "\": name at least one job")));
    }
  }
  if (auto ps = args.Get("--ps-bandwidth")) {
    auto v = ParseNumber("--ps-bandwidth", *ps);
    if (!v.ok()) return fail(v.status());
    request.set_parameter_server_bandwidth_mb_per_s(*v);
  }
  if (auto variant = args.Get("--model-variant")) {
    auto v = predictor::ParseVariant(*variant);
    if (!v.ok()) return fail(absl::InvalidArgumentError(absl::StrCat("--", v.status().message())));
    request.set_model_variant(services::ToProto(*v));
  }
  if (auto base = args.Get("--base")) {
    const services::DataRegistry local = services::DataRegistry::WithBuiltins();
    auto profile = local.ResolveWorkload(*base);
    if (!profile.ok()) return fail(profile.status());
    *request.mutable_base() = *std::move(profile);
  }
  if (auto n = args.Get("--iterations")) {
    auto v = ParseNumber("--iterations", *n);
    if (!v.ok()) return fail(v.status());
    if (!(*v >= 1)) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("--iterations = \"", *n, "\": must be a number of steps >= 1")));
    }
    request.set_iterations(*v);
  }
  pb::ValidateProfileResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
  if (auto s = services::FromGrpc(stub.ValidateProfile(&context, request, &response)); !s.ok()) {
    return fail(s);
  }
  if (io.json) {
    io.out << services::ToJson(response) << "\n";
    return kExitOk;
  }
  io.out << "Fitted on " << absl::StrJoin(request.fit_job_ids(), ",") << " ("
         << predictor::VariantName(services::ToDomain(response.profile().model_variant()))
         << "), predicted " << absl::StrJoin(request.check_job_ids(), ",") << "\n\n";
  Table quality({"parameter", "identified", "note"});
  quality.LeftAlign(0);
  quality.LeftAlign(2);
  for (const pb::FitQuality& q : response.quality()) {
    quality.AddRow({q.parameter(), q.identified() ? "yes" : "no", q.note()});
  }
  quality.Print(io.out);
  io.out << "\n";
  Table table({"cluster", "runs", "observed steps/s", "predicted steps/s", "iterations",
               "observed time (s)", "predicted time (s)", "error %"});
  table.LeftAlign(0);
  for (const pb::ClusterValidation& c : response.clusters()) {
    table.AddRow({Composition(c.cluster()), absl::StrCat(c.runs()),
                  Fixed(c.observed_steps_per_s(), 3), Fixed(c.predicted_steps_per_s(), 3),
                  Fixed(c.iterations(), 0), Fixed(c.observed_time_s(), 1),
                  Fixed(c.predicted_time_s(), 1), Fixed(c.error_pct(), 2)});
  }
  table.Print(io.out);
  io.out << absl::StrFormat("\nMAPE of the time: %.2f%% over %d cluster(s), largest error %.2f%%\n",
                            response.mape(), response.clusters_size(), response.max_error_pct());
  return kExitOk;
}

}  // namespace spotdnn::gateway
