// The single-machine stack: `spotdnn up` starts the four services (and the metadata emulator the
// local provider's instances read their revocation notices from) as background processes on
// loopback ports, with their databases (or one existing PostgreSQL database, `up --store`) and logs
// under one data directory; `spotdnn down` stops them. Other commands find them through
// DATA_DIR/stack.json.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_STACK_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_STACK_H_

#include <sys/types.h>

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace spotdnn::gateway {

// Where a running stack answers.
struct Stack {
  std::string data_dir;
  std::string predictor;    // host:port
  std::string provisioner;  // host:port
  std::string profiler;     // host:port
  std::string detector;     // host:port
  std::string emulator;     // http://host:port
  // The PostgreSQL URI the profiler and detector share; "" when each has its SQLite file in
  // data_dir.
  std::string store;
  std::map<std::string, pid_t> pids;  // binary name -> pid
  // StartStack found it up and started nothing.
  bool already_up = false;
};

// How to start a stack.
struct StackOptions {
  // "" (the profiler and detector each keep a SQLite file in the data directory), or the libpq URI
  // of an existing PostgreSQL database both use (see db::ParseStoreSpec; the password from
  // PGPASSFILE, ~/.pgpass or PGPASSWORD, which the services inherit).
  std::string store;
};

// The data directory: $SPOTDNN_HOME, else ~/.spotdnn, else ./.spotdnn.
std::string DefaultDataDir();

// Reads DATA_DIR/stack.json. NOT_FOUND when there is none (the stack is not up), DATA_LOSS when
// it cannot be parsed.
absl::StatusOr<Stack> ReadStack(const std::string& data_dir);

// Starts the stack from the binaries in `bin_dir`, waiting until each one serves (or reporting
// the end of its log when it does not). A stack already up is returned as it is, unless
// `options.store` names another store than it runs on (FAILED_PRECONDITION). INVALID_ARGUMENT
// naming --store and the value when it is not a postgres:// URI; UNAVAILABLE (or
// PERMISSION_DENIED) naming them when the database cannot be used, before anything starts.
// `progress` gets "Starting the spotdnn stack in DATA_DIR:" and one line per service as it comes
// up, only when something is started.
absl::StatusOr<Stack> StartStack(const std::string& data_dir, const std::string& bin_dir,
                                 std::ostream* progress, const StackOptions& options = {});

// The libpq URI of a `--store` value `up` can use: a postgres:// URI (db::ParseStoreSpec).
// INVALID_ARGUMENT naming --store and the value for anything else, SQLite files included (two
// services cannot share one).
absl::StatusOr<std::string> StackStoreUri(const std::string& store);

// The --replica_id the stack's detector runs with on a shared store: this host's name and a
// digest of the data directory, so stacks on several hosts (or folders) sharing one database are
// distinct replicas, and a restarted stack is the same one.
std::string StackReplicaId(const std::string& data_dir);

// Stops a stack (SIGTERM, then SIGKILL after 10 s) and removes stack.json. NOT_FOUND when none.
absl::Status StopStack(const std::string& data_dir);

// The folder holding the running executable (where the service binaries are built or installed).
std::string SelfDir();

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_STACK_H_
