// spotdnn watch: prints a detector's revocation events as they arrive, resuming after the last
// sequence it printed when the stream breaks.
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"
#include "services/gateway/cli.h"
#include "services/gateway/output.h"

namespace spotdnn::gateway {
namespace {

std::string KindName(pb::RevocationEvent::Kind kind) {
  switch (kind) {
    case pb::RevocationEvent::KIND_NOTICE:
      return "notice";
    case pb::RevocationEvent::KIND_REBALANCE:
      return "rebalance";
    case pb::RevocationEvent::KIND_MAINTENANCE:
      return "maintenance";
    case pb::RevocationEvent::KIND_REVOKED:
      return "revoked";
    case pb::RevocationEvent::KIND_LOST:
      return "lost";
    case pb::RevocationEvent::KIND_RECOVERED:
      return "recovered";
    default:
      return "unspecified";
  }
}

std::string CloudName(pb::Cloud cloud) {
  switch (cloud) {
    case pb::CLOUD_AWS:
      return "aws";
    case pb::CLOUD_GCE:
      return "gce";
    case pb::CLOUD_AZURE:
      return "azure";
    default:
      return "-";
  }
}

std::string Utc(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

// One line per event: "#12  2026-…Z  notice       aws    i-1  job j  terminate  goes …".
std::string EventLine(const pb::RevocationEvent& e) {
  std::string line = absl::StrCat("#", e.sequence(), "  ", Utc(e.notice_unix_ms()), "  ");
  std::string kind = KindName(e.kind());
  kind.resize(std::max<size_t>(kind.size(), 11), ' ');
  std::string cloud = CloudName(e.cloud());
  cloud.resize(std::max<size_t>(cloud.size(), 5), ' ');
  absl::StrAppend(&line, kind, "  ", cloud, "  ", e.instance_id());
  if (!e.job_id().empty()) absl::StrAppend(&line, "  job ", e.job_id());
  if (!e.action().empty()) absl::StrAppend(&line, "  ", e.action());
  if (e.effective_unix_ms() > 0) {
    absl::StrAppend(&line, "  effective ", Utc(e.effective_unix_ms()));
    const double lead_s = (e.effective_unix_ms() - e.notice_unix_ms()) / 1000.0;
    if (lead_s > 0) absl::StrAppend(&line, " (", HumanDuration(lead_s), " after notice)");
  }
  if (!e.detail().empty()) absl::StrAppend(&line, "  — ", e.detail());
  return line;
}

}  // namespace

int Watch(const Args& args, pb::Detector::StubInterface& stub, const Io& io) {
  constexpr absl::string_view kCommand = "watch";
  int count = 0;
  if (auto c = args.Get("--count")) {
    auto parsed = ParseInt("--count", *c, 1, 1 << 30);
    if (!parsed.ok()) return ReportError(parsed.status(), kCommand, io);
    count = *parsed;
  }
  std::optional<std::chrono::steady_clock::time_point> end;
  if (auto t = args.Get("--timeout")) {
    auto seconds = ParseDuration("--timeout", *t);
    if (!seconds.ok()) return ReportError(seconds.status(), kCommand, io);
    end = std::chrono::steady_clock::now() +
          std::chrono::milliseconds(static_cast<int64_t>(*seconds * 1000));
  }
  uint64_t after = 0;
  if (auto a = args.Get("--after")) {
    if (!absl::SimpleAtoi(*a, &after)) {
      return ReportError(absl::InvalidArgumentError(absl::StrCat(
                             "--after = \"", *a, "\": expected a sequence number (0 or more)")),
                         kCommand, io);
    }
  } else {
    // New events only: start after the detector's newest.
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    pb::ReplicaStatusResponse status;
    auto s = services::FromGrpc(stub.ReplicaStatus(&context, {}, &status));
    if (!s.ok()) return ReportError(s, kCommand, io);
    after = status.last_sequence();
  }
  pb::WatchEventsRequest request;
  request.set_job_id(args.Get("--job").value_or(""));
  int printed = 0;
  while (true) {
    grpc::ClientContext context;
    if (end) {
      context.set_deadline(std::chrono::system_clock::now() +
                           (*end - std::chrono::steady_clock::now()));
    }
    request.set_after_sequence(after);
    auto reader = stub.WatchEvents(&context, request);
    pb::RevocationEvent event;
    while (reader->Read(&event)) {
      if (io.json) {
        io.out << services::ToJson(event) << "\n";
      } else {
        io.out << EventLine(event) << "\n";
      }
      io.out.flush();
      after = event.sequence();
      if (count > 0 && ++printed >= count) {
        context.TryCancel();
        reader->Finish();
        return kExitOk;
      }
    }
    const grpc::Status status = reader->Finish();
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
        (end && std::chrono::steady_clock::now() >= *end)) {
      return kExitOk;  // --timeout reached
    }
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE && !status.ok()) {
      return ReportError(services::FromGrpc(status), kCommand, io);
    }
    // The detector went away (or restarted): resume after the last event printed.
    io.err << "spotdnn watch: stream ended (" << status.error_message() << "); resuming after #"
           << after << "\n";
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace spotdnn::gateway
