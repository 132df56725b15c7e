// spotdnn watch: prints a detector's revocation events as they arrive, resuming after the last
// sequence it printed when the stream breaks; gives up (exit 1, naming the server) when the
// detector cannot be reached within WatchRetryLimits.
#include "services/gateway/cli/watch_command.h"

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"
#include "services/common/server.h"
#include "services/detector/detector_service.h"
#include "services/gateway/cli/cli.h"
#include "services/gateway/cli/command.h"
#include "services/gateway/cli/output.h"

namespace spotdnn::gateway {
namespace {

std::string Utc(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

// One line per event: "#12  2026-…Z  notice       aws    i-1  job j  terminate  goes …".
std::string EventLine(const pb::RevocationEvent& e) {
  std::string line = absl::StrCat("#", e.sequence(), "  ", Utc(e.notice_unix_ms()), "  ");
  std::string kind = services::EnumLabel(e.kind());
  kind.resize(std::max<size_t>(kind.size(), 11), ' ');
  std::string cloud = e.cloud() == pb::CLOUD_UNSPECIFIED ? "-" : services::EnumLabel(e.cloud());
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
  return WatchWithLimits(args, stub, io, WatchRetryLimits());
}

int WatchWithLimits(const Args& args, pb::Detector::StubInterface& stub, const Io& io,
                    const WatchRetryLimits& limits) {
  using Clock = std::chrono::steady_clock;
  constexpr absl::string_view kCommand = "watch";
  const std::string server = args.Get("--server").value_or(std::string(kDefaultDetectorAddress));
  int count = 0;
  if (auto c = args.Get("--count")) {
    auto parsed = ParseInt("--count", *c, 1, 1 << 30);
    if (!parsed.ok()) return ReportError(parsed.status(), kCommand, io);
    count = *parsed;
  }
  std::optional<Clock::time_point> end;
  std::optional<double> timeout_s;
  if (auto t = args.Get("--timeout")) {
    auto seconds = ParseDuration("--timeout", *t);
    if (!seconds.ok()) return ReportError(seconds.status(), kCommand, io);
    timeout_s = *seconds;
    end = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(*seconds * 1000));
  }
  auto ms = [](absl::Duration d) {
    return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
  };
  // Until when a detector that has not answered yet is retried: --timeout, else first_connect.
  const Clock::time_point connect_by = end ? *end : Clock::now() + ms(limits.first_connect);
  const std::string connect_budget =
      timeout_s ? absl::StrCat("--timeout ", HumanDuration(*timeout_s))
                : HumanDuration(absl::ToDoubleSeconds(limits.first_connect));
  auto unreachable = [&](const std::string& why) {
    return ReportError(absl::UnavailableError(absl::StrCat("cannot reach the detector at ", server,
                                                           " within ", connect_budget, ": ", why)),
                       kCommand, io);
  };
  uint64_t after = 0;
  const bool after_given = args.Get("--after").has_value();
  if (auto a = args.Get("--after")) {
    if (!absl::SimpleAtoi(*a, &after)) {
      return ReportError(absl::InvalidArgumentError(absl::StrCat(
                             "--after = \"", *a, "\": expected a sequence number (0 or more)")),
                         kCommand, io);
    }
  } else {
    // New events only: start after the detector's newest. Waits for a detector that is starting
    // up, but not longer than the connect bound.
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    context.set_deadline(std::chrono::system_clock::now() + (connect_by - Clock::now()));
    pb::ReplicaStatusResponse status;
    const grpc::Status s = stub.ReplicaStatus(&context, {}, &status);
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return unreachable(s.error_message());
    }
    if (!s.ok()) return ReportError(services::FromGrpc(s), kCommand, io);
    after = status.last_sequence();
  }
  pb::WatchEventsRequest request;
  request.set_job_id(args.Get("--job").value_or(""));
  int printed = 0;
  bool ever_up = false;    // a stream has been up
  bool announced = false;  // the current outage was reported on stderr
  Clock::time_point give_up = connect_by;
  while (true) {
    grpc::ClientContext context;
    if (end) {
      context.set_deadline(std::chrono::system_clock::now() + (*end - Clock::now()));
    }
    request.set_after_sequence(after);
    auto reader = stub.WatchEvents(&context, request);
    // The detector sends its header as soon as the stream is open: that tells an unreachable
    // detector from a quiet one.
    reader->WaitForInitialMetadata();
    bool up = context.GetServerInitialMetadata().count(grpc::string_ref(
                  services::kWatchOpenedHeader.data(), services::kWatchOpenedHeader.size())) > 0;
    if (up) {
      ever_up = true;
      announced = false;
    }
    pb::RevocationEvent event;
    while (reader->Read(&event)) {
      up = ever_up = true;
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
    const bool timed_out =
        status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED || (end && Clock::now() >= *end);
    if (timed_out) {
      if (!ever_up) return unreachable(status.error_message());
      return kExitOk;  // --timeout reached
    }
    if (status.error_code() == grpc::StatusCode::OUT_OF_RANGE) {
      // Waiting would skip events (or the ones asked for are gone): say so and stop.
      const std::string from = after_given && printed == 0
                                   ? absl::StrCat("--after = ", after)
                                   : absl::StrCat("resuming after #", after);
      return ReportError(
          absl::OutOfRangeError(absl::StrCat(
              from, " at ", server, ": ", status.error_message(),
              "; run again with a smaller --after to replay what it has, or without --after "
              "for new events only")),
          kCommand, io);
    }
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE && !status.ok()) {
      return ReportError(services::FromGrpc(status), kCommand, io);
    }
    // The detector went away, restarted or is not there yet: retry, within bounds.
    const Clock::time_point now = Clock::now();
    if (up) give_up = now + ms(limits.resume);
    if (now >= give_up) {
      if (!ever_up) return unreachable(status.error_message());
      return ReportError(
          absl::UnavailableError(absl::StrCat("lost the detector at ", server, ": no stream for ",
                                              HumanDuration(absl::ToDoubleSeconds(limits.resume)),
                                              " after #", after, " (", status.error_message(),
                                              "); run again with --after ", after, " to resume")),
          kCommand, io);
    }
    if (!announced) {
      if (ever_up) {
        io.err << "spotdnn watch: stream ended (" << status.error_message() << "); resuming after #"
               << after << ", retrying for up to "
               << HumanDuration(absl::ToDoubleSeconds(limits.resume)) << "\n";
      } else {
        io.err << "spotdnn watch: cannot reach the detector at " << server << " yet ("
               << status.error_message() << "); retrying for up to " << connect_budget << "\n";
      }
      announced = true;
    }
    std::this_thread::sleep_until(std::min(now + ms(limits.retry_every), give_up));
  }
}

std::vector<Command> WatchCommands() {
  return {{
      .name = "watch",
      .summary = "revocation events from a detector, as they arrive",
      .synopsis = "[--server HOST:PORT] [--job J] [--after SEQ] [--count N] [--timeout DURATION]\n"
                  "[--json]",
      .description =
          "Prints a spotdnn-detector's revocation events (notice, rebalance, maintenance, "
          "revoked, lost,\nrecovered) as they arrive, one line each. If the stream breaks it "
          "resumes after the last event\nprinted, so none is missed. It gives up (exit 1, naming "
          "the server) when the detector cannot be\nreached within --timeout (or 10 s) at the "
          "start, or for 60 s after a stream broke; an --after\npast the detector's newest event "
          "exits 2 naming both numbers.",
      .flags = {{"--server", "HOST:PORT", "the detector (default 127.0.0.1:50054)"},
                {"--job", "J", "only this job's events"},
                {"--after", "SEQ",
                 "replay events after this sequence number first (default: new "
                 "ones only)"},
                {"--count", "N", "stop after N events"},
                {"--timeout", "DURATION", "stop after this long (e.g. 30s, 5m)"},
                {"--json", "", "one JSON object per event, one per line"}},
      .run =
          [](const Args& args, const Io& io) {
            const std::string target =
                args.Get("--server").value_or(std::string(kDefaultDetectorAddress));
            if (target.find(':') == std::string::npos) {
              return ReportError(absl::InvalidArgumentError(absl::StrCat("--server = \"", target,
                                                                         "\": expected HOST:PORT")),
                                 "watch", io);
            }
            auto stub = pb::Detector::NewStub(services::MakeChannel(target));
            return Watch(args, *stub, io);
          },
  }};
}

}  // namespace spotdnn::gateway
