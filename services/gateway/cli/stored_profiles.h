// Where the CLI finds stored workload profiles: the profiler's database under the data directory
// (DATA_DIR/profiles.db, the file the stack's spotdnn-profiler serves too), or a running
// spotdnn-profiler named on the command line. `profile` reads and writes through it; `predict`,
// `plan` and `simulate` resolve a --workload NAME through it the way `spotdnn run` does.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_STORED_PROFILES_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_STORED_PROFILES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "services/common/data_registry.h"
#include "services/gateway/cli/args.h"
#include "services/profiler/profiler_service.h"
#include "spotdnn/v1/predictor.pb.h"
#include "spotdnn/v1/profiler.grpc.pb.h"

namespace spotdnn::gateway {

namespace pb = ::spotdnn::v1;

// The profiler behind a command: a remote stub, or the service run in-process over a database.
// `stub` is null when there is no profiler to ask (see ConnectProfiler's `create`).
struct ProfilerConnection {
  std::unique_ptr<services::ProfilerServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<pb::Profiler::StubInterface> stub;
  std::string where;  // "DATA_DIR/profiles.db" or "the spotdnn-profiler at HOST:PORT", for messages
};

// The profile database of a command: --db FILE, else DATA_DIR/profiles.db.
std::string ProfileDbOf(const Args& args);

// Connects to the profiler named by `server_flag` (--server for `profile`, --profiler for
// predict/plan/simulate) when given, else runs the profiler in-process over ProfileDbOf(args).
// With `create` false a database that does not exist yet is not created: the connection then has
// no stub (there are no stored profiles to read).
absl::StatusOr<ProfilerConnection> ConnectProfiler(const Args& args, absl::string_view server_flag,
                                                   bool create);

// A --workload argument as `spotdnn run` resolves a job's workload: a file
// (services::LooksLikePath) is read and sent inline; else a stored profile of that name (the latest
// version, from the profiler of ConnectProfiler(args, "--profiler", false)) is sent inline; else
// the name goes as it is, for the service to find among its built-ins. `described`, when given,
// gets how it was found for the output ("resnet110-mine (stored profile, version 2)"; the bare name
// otherwise).
absl::StatusOr<pb::WorkloadRef> ResolveWorkloadArg(const Args& args, const std::string& arg,
                                                   const services::DataRegistry& local,
                                                   std::string* described = nullptr);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_STORED_PROFILES_H_
