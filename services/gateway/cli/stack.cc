#include "services/gateway/cli/stack.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/db/backends.h"
#include "base/db/database.h"
#include "base/files.h"
#include "nlohmann/json.hpp"

namespace spotdnn::gateway {
namespace {

namespace fs = std::filesystem;

// One process of the stack.
struct Part {
  const char* binary;
  const char* key;  // in stack.json
  bool grpc;        // a gRPC service (else the HTTP metadata emulator)
};

constexpr Part kParts[] = {{"spotdnn-predictor", "predictor", true},
                           {"spotdnn-provisioner", "provisioner", true},
                           {"spotdnn-profiler", "profiler", true},
                           {"spotdnn-detector", "detector", true},
                           {"spotdnn-metadata-emulator", "emulator", false}};

bool Alive(pid_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

// Whether `pid` is still a service of the stack in `data_dir`: its command line names a port file
// under the stack's run/ folder. After a reboot or a crash a recorded pid may belong to another
// program by now, which must never be signalled.
bool OfThisStack(pid_t pid, const std::string& data_dir) {
  if (!Alive(pid)) return false;
  std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"), std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::error_code ec;
  const fs::path run = fs::weakly_canonical(fs::absolute(fs::path(data_dir) / "run"), ec);
  for (absl::string_view arg : absl::StrSplit(buffer.str(), '\0')) {
    if (!absl::ConsumePrefix(&arg, "--port_file=")) continue;
    // The path as `up` gave it (relative or not), compared as the folder it names.
    const fs::path port_file(std::string{arg});
    if (fs::weakly_canonical(port_file.parent_path(), ec) == run) return true;
  }
  return false;
}

// Starts `argv` detached from this process (its own session; stdout and stderr to `log`); the
// stack outlives the command that started it.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const fs::path& log) {
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    setsid();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int in = open("/dev/null", O_RDONLY);
    int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (in >= 0) dup2(in, 0);
    if (out >= 0) {
      dup2(out, 1);
      dup2(out, 2);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

std::string DefaultDataDir() {
  if (const char* home = std::getenv("SPOTDNN_HOME"); home != nullptr && *home != '\0') return home;
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return (fs::path(home) / ".spotdnn").string();
  }
  return ".spotdnn";
}

std::string SelfDir() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : self.parent_path().string();
}

absl::StatusOr<Stack> ReadStack(const std::string& data_dir) {
  const fs::path path = fs::path(data_dir) / "stack.json";
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("no spotdnn stack is up in ", data_dir, " (start one with `spotdnn up`)"));
  }
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return absl::DataLossError(absl::StrCat(path.string(), ": not JSON"));
  Stack stack{.data_dir = data_dir};
  for (const Part& part : kParts) {
    const nlohmann::json& entry = doc[part.key];
    if (!entry.is_object() || !entry["address"].is_string() || !entry["pid"].is_number_integer()) {
      return absl::DataLossError(
          absl::StrCat(path.string(), ": \"", part.key, "\" has no address and pid"));
    }
    std::string address = entry["address"];
    (part.grpc ? (std::string(part.key) == "predictor"     ? stack.predictor
                  : std::string(part.key) == "provisioner" ? stack.provisioner
                  : std::string(part.key) == "profiler"    ? stack.profiler
                                                           : stack.detector)
               : stack.emulator) = address;
    stack.pids[part.binary] = entry["pid"].get<pid_t>();
  }
  if (doc.contains("store") && doc["store"].is_string()) stack.store = doc["store"];
  return stack;
}

std::string StackReplicaId(const std::string& data_dir) {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  std::error_code ec;
  const std::string dir = fs::weakly_canonical(fs::absolute(data_dir), ec).string();
  std::uint32_t digest = 2166136261u;  // FNV-1a: the same on every build, unlike std::hash
  for (unsigned char c : dir) digest = (digest ^ c) * 16777619u;
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", digest);
  return absl::StrCat(host, "-", hex);
}

absl::StatusOr<std::string> StackStoreUri(const std::string& store) {
  if (store.empty()) {
    return absl::InvalidArgumentError(
        "--store = \"\": empty: give the postgres://USER@HOST:PORT/DB URI of an existing "
        "database");
  }
  absl::StatusOr<db::StoreSpec> spec = db::ParseStoreSpec(store, "--store");
  if (!spec.ok()) return spec.status();
  // Two programs on one SQLite file would both own its schema_version: `up` shares only a
  // database server.
  if (spec->backend != db::Backend::kPostgres) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--store = \"", store,
        "\": `up` puts the profiler and the detector on one store, which must be an existing "
        "PostgreSQL database (postgres://USER@HOST:PORT/DB); without --store each keeps its "
        "own SQLite file in the data directory"));
  }
  return spec->target;
}

absl::StatusOr<Stack> StartStack(const std::string& data_dir, const std::string& bin_dir,
                                 std::ostream* progress, const StackOptions& options) {
  const std::string& store = options.store;
  std::string store_uri;  // the libpq URI, when store is given
  if (!store.empty()) {
    absl::StatusOr<std::string> uri = StackStoreUri(store);
    if (!uri.ok()) return uri.status();
    store_uri = *uri;
  }
  if (auto up = ReadStack(data_dir); up.ok()) {
    bool all = true;
    for (const auto& [name, pid] : up->pids) all = all && OfThisStack(pid, data_dir);
    if (all) {
      if (!store.empty() && up->store != store) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--store = \"", store, "\": the stack in ", data_dir, " is already up on ",
            up->store.empty() ? "its SQLite files" : absl::StrCat("\"", up->store, "\""),
            "; stop it with `spotdnn down` first"));
      }
      up->already_up = true;
      return up;
    }
    (void)StopStack(data_dir);  // a partly dead stack: start afresh
  }
  if (!store_uri.empty()) {
    // Reach the database (and have the rights the stores need: CREATE on it for their schemas)
    // before starting anything, rather than leave a service that cannot record a thing. The
    // schema "public" is in every database PostgreSQL makes: this connects and changes nothing.
    // It waits a few seconds for a database that is starting.
    absl::StatusOr<std::unique_ptr<db::Database>> reached =
        db::OpenPostgres(store_uri, "--store", "public");
    if (!reached.ok()) return reached.status();
  }
  if (progress != nullptr) {
    *progress << "Starting the spotdnn stack in " << data_dir << ":" << std::endl;
  }
  // Absolute: the services' command lines name it, and `down` recognises them by it.
  const fs::path dir = fs::absolute(data_dir);
  std::error_code ec;
  fs::create_directories(dir / "logs", ec);
  fs::create_directories(dir / "run", ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("data dir = \"", data_dir, "\": cannot be created: ", ec.message()));
  }
  nlohmann::json doc;
  std::vector<pid_t> started;
  auto fail = [&](absl::Status status) {
    for (pid_t pid : started) kill(pid, SIGTERM);
    for (pid_t pid : started) waitpid(pid, nullptr, 0);
    return status;
  };
  for (const Part& part : kParts) {
    const fs::path binary = fs::path(bin_dir) / part.binary;
    if (access(binary.c_str(), X_OK) != 0) {
      return fail(absl::NotFoundError(
          absl::StrCat(binary.string(),
                       " is not there: build it, or give the binaries' folder with --bin-dir")));
    }
    const fs::path port_file = dir / "run" / absl::StrCat(part.key, ".port");
    fs::remove(port_file, ec);
    std::vector<std::string> argv = {binary.string(), "--port_file=" + port_file.string()};
    if (part.grpc) {
      argv.push_back("--listen=127.0.0.1:0");
    } else {
      argv.insert(argv.end(), {"--host=127.0.0.1", "--port=0", "--threads=64"});
    }
    // The services inherit this environment: PGPASSFILE or PGPASSWORD reach libpq.
    if (std::string(part.key) == "profiler") {
      argv.push_back(store.empty() ? "--db=" + (dir / "profiles.db").string() : "--store=" + store);
    } else if (std::string(part.key) == "detector") {
      if (store.empty()) {
        argv.push_back("--db=" + (dir / "detector.db").string());
      } else {
        argv.push_back("--store=" + store);
        argv.push_back("--replica_id=" + StackReplicaId(dir.string()));
      }
    }
    const fs::path log = dir / "logs" / absl::StrCat(part.binary, ".log");
    absl::StatusOr<pid_t> pid = Spawn(argv, log);
    if (!pid.ok()) return fail(pid.status());
    started.push_back(*pid);
    // Wait until it serves: the port file appears once it has bound.
    int port = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (port == 0) {
      std::ifstream in(port_file);
      std::string text;
      if (in >> text && absl::SimpleAtoi(text, &port) && port > 0) break;
      port = 0;
      int status = 0;
      if (waitpid(*pid, &status, WNOHANG) == *pid) {
        started.pop_back();
        return fail(absl::UnavailableError(absl::StrCat(part.binary, " exited at start; ",
                                                        log.string(), " ends with:\n",
                                                        base::FileTail(log.string(), 2000))));
      }
      if (absl::Now() > deadline) {
        return fail(absl::DeadlineExceededError(
            absl::StrCat(part.binary, " did not serve within 30 s; see ", log.string())));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    const std::string address =
        part.grpc ? absl::StrCat("127.0.0.1:", port) : absl::StrCat("http://127.0.0.1:", port);
    doc[part.key] = {{"address", address}, {"pid", *pid}, {"log", log.string()}};
    if (progress != nullptr) {
      *progress << "  " << part.binary << " on " << address << " (pid " << *pid << ")" << std::endl;
    }
  }
  if (!store.empty()) doc["store"] = store;
  const fs::path path = dir / "stack.json";
  {
    std::ofstream out(path.string() + ".tmp");
    out << doc.dump(2) << "\n";
    if (!out) return fail(absl::UnavailableError(absl::StrCat(path.string(), ": cannot write")));
  }
  fs::rename(path.string() + ".tmp", path, ec);
  if (ec) return fail(absl::UnavailableError(absl::StrCat(path.string(), ": ", ec.message())));
  return ReadStack(data_dir);
}

absl::Status StopStack(const std::string& data_dir) {
  absl::StatusOr<Stack> stack = ReadStack(data_dir);
  if (!stack.ok()) return stack.status();
  std::vector<pid_t> signalled;
  for (const auto& [name, pid] : stack->pids) {
    if (OfThisStack(pid, data_dir) && kill(pid, SIGTERM) == 0) signalled.push_back(pid);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (pid_t pid : signalled) {
    while (Alive(pid) && absl::Now() < deadline) {
      waitpid(pid, nullptr, WNOHANG);  // our own child when `up` ran in this process
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (OfThisStack(pid, data_dir)) kill(pid, SIGKILL);
    waitpid(pid, nullptr, WNOHANG);
  }
  std::error_code ec;
  fs::remove(fs::path(data_dir) / "stack.json", ec);
  return absl::OkStatus();
}

}  // namespace spotdnn::gateway
