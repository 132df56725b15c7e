#include "tests/testing/postgres_server.h"

#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/ports.h"

namespace spotdnn::testing_util {
namespace {

namespace fs = std::filesystem;

constexpr char kBinDir[] = "/usr/lib/postgresql/15/bin";

// Starts `argv` as uid/gid with stdout and stderr appended to `log`; its pid, or -1.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log, uid_t uid, gid_t gid,
            const std::string& home) {
  // Everything the child needs is made before fork: after it only async-signal-safe calls.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::string home_env = "HOME=" + home;
  std::vector<char*> env = {const_cast<char*>("PATH=/usr/bin:/bin"), const_cast<char*>("LC_ALL=C"),
                            const_cast<char*>(home_env.c_str()), nullptr};
  const bool change_user = geteuid() != uid;
  const pid_t pid = fork();
  if (pid != 0) return pid;
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
  }
  if (change_user && (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0)) {
    _exit(126);
  }
  // Quit with the test (after the user change, which would clear it).
  prctl(PR_SET_PDEATHSIG, SIGQUIT);
  execve(args[0], args.data(), env.data());
  _exit(127);
}

// Waits up to `timeout` for `pid` to exit; its wait status, or -1 when it is still running.
int WaitFor(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string Conninfo(int port, const std::string& db) {
  return absl::StrCat("host=127.0.0.1 port=", port, " user=postgres dbname=", db,
                      " connect_timeout=5");
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostgresServer>> PostgresServer::Create() {
  const char* override_bin = getenv("SPOTDNN_POSTGRES_BIN");
  const std::string bin = override_bin != nullptr ? override_bin : kBinDir;
  for (const char* program : {"initdb", "postgres"}) {
    if (access((fs::path(bin) / program).c_str(), X_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "PostgreSQL server binary ", (fs::path(bin) / program).string(),
          " is missing: the PostgreSQL tests need a real server; install it with deploy/setup.sh "
          "(Debian package postgresql) or point SPOTDNN_POSTGRES_BIN at its bin folder"));
    }
  }
  // PostgreSQL refuses to run as root: as root, the server runs as nobody.
  uid_t uid = geteuid();
  gid_t gid = getegid();
  if (uid == 0) {
    const passwd* nobody = getpwnam("nobody");
    if (nobody == nullptr)
      return absl::FailedPreconditionError("running as root and no user nobody");
    uid = nobody->pw_uid;
    gid = nobody->pw_gid;
  }
  // /tmp rather than TMPDIR: the socket's path must stay under ~100 bytes.
  char tmpl[] = "/tmp/spotdnn-pg-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("cannot make a temporary folder");
  std::unique_ptr<PostgresServer> server(new PostgresServer(tmpl, bin, uid, gid));
  if (chown(tmpl, uid, gid) != 0) {
    return absl::InternalError(absl::StrCat("cannot give ", tmpl, " to uid ", uid));
  }
  const pid_t initdb =
      Spawn({(fs::path(bin) / "initdb").string(), "-D", server->dir_ + "/data", "-U", "postgres",
             "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync"},
            server->dir_ + "/server.log", uid, gid, server->dir_);
  const int status = initdb < 0 ? -1 : WaitFor(initdb, std::chrono::seconds(120));
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    if (initdb > 0 && status == -1) kill(initdb, SIGKILL);
    return absl::InternalError(absl::StrCat("initdb failed: ", server->LogTail()));
  }
  // A port that was free may be taken before the server binds it: a few tries.
  absl::Status started;
  for (int attempt = 0; attempt < 5; ++attempt) {
    started = server->StartOn(FreeLoopbackPort());
    if (started.ok()) return server;
  }
  return started;
}

PostgresServer::~PostgresServer() {
  (void)Stop();
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

absl::Status PostgresServer::StartOn(int port) {
  if (pid_ > 0) return absl::FailedPreconditionError("the PostgreSQL server is running");
  const std::string log = dir_ + "/server.log";
  pid_ =
      Spawn({(fs::path(bin_) / "postgres").string(), "-D", dir_ + "/data", "-k", dir_, "-p",
             absl::StrCat(port), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c",
             "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200"},
            log, uid_, gid_, dir_);
  if (pid_ < 0) return absl::InternalError("cannot start postgres");
  const std::string conninfo = Conninfo(port, "postgres");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (PQping(conninfo.c_str()) == PQPING_OK) {
      port_ = port;
      return absl::OkStatus();
    }
    if (WaitFor(pid_, std::chrono::milliseconds(50)) != -1) {
      pid_ = -1;
      return absl::InternalError(
          absl::StrCat("postgres on 127.0.0.1:", port, " exited: ", LogTail()));
    }
  }
  kill(pid_, SIGKILL);
  WaitFor(pid_, std::chrono::seconds(10));
  pid_ = -1;
  return absl::InternalError(absl::StrCat("postgres on 127.0.0.1:", port,
                                          " did not accept connections in 60 s: ", LogTail()));
}

absl::Status PostgresServer::Stop() {
  if (pid_ <= 0) return absl::OkStatus();
  kill(pid_, SIGINT);  // a fast shutdown: sessions end, the data stays consistent
  if (WaitFor(pid_, std::chrono::seconds(30)) == -1) {
    kill(pid_, SIGKILL);
    WaitFor(pid_, std::chrono::seconds(10));
  }
  pid_ = -1;
  return absl::OkStatus();
}

absl::Status PostgresServer::Start() {
  absl::Status status;
  for (int attempt = 0; attempt < 5; ++attempt) {  // the port may still be closing
    status = StartOn(port_);
    if (status.ok()) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return status;
}

absl::StatusOr<std::string> PostgresServer::CreateDatabase() {
  const std::string name = absl::StrCat("test_", ++databases_);
  PGconn* conn = PQconnectdb(Conninfo(port_, "postgres").c_str());
  absl::Status status;
  if (PQstatus(conn) != CONNECTION_OK) {
    status = absl::UnavailableError(absl::StrCat("cannot connect: ", PQerrorMessage(conn)));
  } else {
    PGresult* res = PQexec(conn, absl::StrCat("CREATE DATABASE ", name).c_str());
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
      status = absl::InternalError(
          absl::StrCat("CREATE DATABASE ", name, ": ", PQresultErrorMessage(res)));
    }
    PQclear(res);
  }
  PQfinish(conn);
  if (!status.ok()) return status;
  return absl::StrCat("postgresql://postgres@127.0.0.1:", port_, "/", name);
}

std::string PostgresServer::LogTail() const {
  std::ifstream in(dir_ + "/server.log");
  std::stringstream all;
  all << in.rdbuf();
  const std::string text = all.str();
  return text.size() <= 2000 ? text : text.substr(text.size() - 2000);
}

namespace {

std::mutex shared_mu;
std::unique_ptr<PostgresServer>* shared_server = new std::unique_ptr<PostgresServer>();
absl::Status* shared_status = new absl::Status();

// Stops the shared server when the tests end.
class SharedServerEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    std::lock_guard<std::mutex> lock(shared_mu);
    shared_server->reset();
  }
};

[[maybe_unused]] ::testing::Environment* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new SharedServerEnvironment);

}  // namespace

absl::StatusOr<PostgresServer*> SharedPostgresServer() {
  std::lock_guard<std::mutex> lock(shared_mu);
  if (*shared_server == nullptr && shared_status->ok()) {
    auto server = PostgresServer::Create();
    if (server.ok()) {
      *shared_server = *std::move(server);
    } else {
      *shared_status = server.status();  // each PostgreSQL test fails with it; no retrying
    }
  }
  if (!shared_status->ok()) return *shared_status;
  return shared_server->get();
}

std::string StoreBackendName(const ::testing::TestParamInfo<StoreBackend>& info) {
  return info.param == StoreBackend::kSqlite ? "sqlite" : "postgres";
}

absl::StatusOr<std::string> FreshStoreSpec(StoreBackend backend, const std::string& sqlite_path) {
  if (backend == StoreBackend::kSqlite) return sqlite_path;
  absl::StatusOr<PostgresServer*> server = SharedPostgresServer();
  if (!server.ok()) return server.status();
  return (*server)->CreateDatabase();
}

void StoreBackendTest::SetUp() {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(name.begin(), name.end(), '/', '-');
  dir_ = std::filesystem::temp_directory_path() /
         absl::StrCat("spotdnn-store-test-", getpid(), "-", name);
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  auto spec = FreshStoreSpec(GetParam(), (dir_ / "store.db").string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec_ = *spec;
}

void StoreBackendTest::TearDown() { std::filesystem::remove_all(dir_); }

}  // namespace spotdnn::testing_util
