// The spotdnn command-line gateway. Commands (command.h: the table) talk to the services through
// their stub interfaces, to a remote server (--server HOST:PORT) or to the same service run
// in-process. This header has what the command files and their tests share.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_CLI_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_CLI_H_

#include <ostream>
#include <string>
#include <vector>

#include "services/common/data_registry.h"
#include "services/gateway/cli/args.h"
#include "spotdnn/v1/detector.grpc.pb.h"
#include "spotdnn/v1/predictor.grpc.pb.h"
#include "spotdnn/v1/profiler.grpc.pb.h"
#include "spotdnn/v1/provisioner.grpc.pb.h"

namespace spotdnn::gateway {

namespace pb = ::spotdnn::v1;

// Exit statuses of every command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;     // the service failed or could not be reached
inline constexpr int kExitBadInput = 2;    // the user's input is wrong
inline constexpr int kExitInfeasible = 3;  // a plan cannot meet the SLO

// Where a command's output goes and how it is shaped.
struct Io {
  std::ostream& out;
  std::ostream& err;
  bool json = false;
};

// Runs `spotdnn ARGS...` (argv without the program name) and returns the exit status.
int RunCli(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);

// `spotdnn predict` against `stub`; `local` resolves workload/catalog files the user names.
int Predict(const Args& args, pb::Predictor::StubInterface& stub,
            const services::DataRegistry& local, const Io& io);

// A workload or catalog named on the command line: a file (see LooksLikePath) is read here and
// sent inline; a name goes as it is, for the service to resolve.
absl::StatusOr<pb::WorkloadRef> WorkloadRefFor(const std::string& arg,
                                               const services::DataRegistry& local);
absl::StatusOr<pb::CatalogRef> CatalogRefFor(const std::string& arg,
                                             const services::DataRegistry& local);

// `spotdnn plan` against `stub`.
int Plan(const Args& args, pb::Provisioner::StubInterface& stub,
         const services::DataRegistry& local, const Io& io);
// One `spotdnn profile` subcommand (import, fit, show, list, export, delete) against `stub`.
int Profile(const std::string& subcommand, const Args& args, pb::Profiler::StubInterface& stub,
            const Io& io);
// `spotdnn profile validate --fit JOBS --check JOBS`: fits on the first jobs and predicts every
// cluster of the second, against `stub`.
int ProfileValidateCommand(const Args& args, pb::Profiler::StubInterface& stub, const Io& io);
// `spotdnn profile validate-speed`: runs here, on the files named by --runs.
int ValidateSpeedCommand(const Args& args, const Io& io);
// spotdnn profile validate-convergence (profile_validate_command.cc).
int ValidateConvergenceCommand(const Args& args, const Io& io);
// `spotdnn watch` against a detector: prints events as they arrive (one line each, or one JSON
// object per line with --json), resuming after the last one printed when the stream breaks;
// stops after --count events or --timeout.
int Watch(const Args& args, pb::Detector::StubInterface& stub, const Io& io);

// `spotdnn catalog hazards` with its parsed flags: lifetime distributions into a catalog.
int CatalogHazards(const Args& args, const Io& io);
// `spotdnn simulate` against `stub`: replays a job with sampled revocations.
int Simulate(const Args& args, pb::Provisioner::StubInterface& stub,
             const services::DataRegistry& local, const Io& io);

// Reports a failed status (stderr, and a JSON error object on stdout with --json) and returns the
// exit status for its code.
int ReportError(const absl::Status& status, absl::string_view command, const Io& io);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_CLI_H_
