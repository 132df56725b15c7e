// spotdnn-metadata-emulator: AWS, Google Cloud and Azure metadata services on a local port, with
// notices scheduled per instance over its /emulator/ control routes (see
// detector/metadata_emulator.h).
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "detector/metadata_emulator.h"
#include "services/common/program.h"
#include "services/common/server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, host, "127.0.0.1", "address to serve on");
ABSL_FLAG(int, port, 0,
          "port to serve on; 0 picks a free one (logged, and written to --port_file)");
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file once serving");
ABSL_FLAG(int, threads, 256, "HTTP worker threads (each open connection or long poll holds one)");
ABSL_FLAG(bool, keep_alive, true, "keep connections open between requests");

int main(int argc, char** argv) {
  spotdnn::services::BlockShutdownSignals();
  spotdnn::services::ParseProgramCommandLine(
      argc, argv, "spotdnn-metadata-emulator",
      "Local AWS/GCE/Azure metadata services for spotdnn instances.");
  auto logger = spdlog::stderr_color_mt("spotdnn-metadata-emulator");
  spotdnn::detector::MetadataEmulator::Options options;
  options.host = absl::GetFlag(FLAGS_host);
  options.port = absl::GetFlag(FLAGS_port);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.keep_alive = absl::GetFlag(FLAGS_keep_alive);
  auto emulator = spotdnn::detector::MetadataEmulator::Start(options);
  if (!emulator.ok()) {
    logger->error("{}", std::string(emulator.status().message()));
    return 1;
  }
  logger->info("listening on {}:{}; instance endpoints are http://{}:{}/i/ID", options.host,
               (*emulator)->port(), options.host, (*emulator)->port());
  if (const std::string file = absl::GetFlag(FLAGS_port_file); !file.empty()) {
    std::ofstream(file, std::ios::trunc) << (*emulator)->port() << "\n";
  }
  const int signal = spotdnn::services::WaitForShutdownSignal();
  logger->info("signal {} received; stopping", signal);
  (*emulator)->Stop();
  return 0;
}
