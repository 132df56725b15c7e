#include "services/gateway/job/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace spotdnn::job {
namespace {

// The store: torch.distributed.TCPStore as the master, kept alive until SIGTERM. It writes
// "PID PORT" to the ready file (atomically) once it listens. argv: the marker, the job, the port,
// the ready file.
constexpr char kStoreScript[] = R"PY(
import os, signal, sys, time
from datetime import timedelta
job, port, ready = sys.argv[2], int(sys.argv[3]), sys.argv[4]
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                 timeout=timedelta(seconds=60))
with open(ready + ".tmp", "w") as f:
    f.write("%d %d\n" % (os.getpid(), store.port))
os.replace(ready + ".tmp", ready)
print("spotdnn rendezvous for %s listening on port %d" % (job, store.port), flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(3600)
)PY";

constexpr char kMarker[] = "spotdnn-rendezvous";

std::string TempDir() {
  const char* dir = std::getenv("TMPDIR");
  return dir == nullptr || *dir == '\0' ? "/tmp" : dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The last `n` lines of a file (for an error message).
std::string Tail(const std::string& path, int n) {
  std::vector<std::string> lines = absl::StrSplit(ReadAll(path), '\n', absl::SkipEmpty());
  const size_t from = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0;
  std::vector<std::string> tail(lines.begin() + from, lines.end());
  return absl::StrJoin(tail, " | ");
}

// True when process `pid` runs (not a zombie) with the store's marker and `job_id` on its
// command line.
bool IsStoreProcess(int64_t pid, const std::string& job_id) {
  if (pid <= 0) return false;
  const std::string stat = ReadAll(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z') {
    return false;
  }
  const std::string cmdline = ReadAll(absl::StrCat("/proc/", pid, "/cmdline"));
  std::vector<std::string> args = absl::StrSplit(cmdline, '\0');
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == kMarker && args[i + 1] == job_id) return true;
  }
  return false;
}

// True when 127.0.0.1:port accepts a TCP connection within a second (the store listens on every
// interface, so the loopback answers for it).
bool Accepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  if (!ok && errno == EINPROGRESS) {
    pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
    int error = 0;
    socklen_t length = sizeof(error);
    ok = poll(&p, 1, 1000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 &&
         error == 0;
  }
  close(fd);
  return ok;
}

}  // namespace

std::string RendezvousRecord::Endpoint() const { return absl::StrCat(host, ":", port); }

std::string RendezvousJson(const RendezvousRecord& record) {
  return nlohmann::json{{"host", record.host}, {"port", record.port}, {"pid", record.pid}}.dump();
}

absl::StatusOr<RendezvousRecord> ParseRendezvousJson(const std::string& text) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (!doc.is_object() || !doc["host"].is_string() || !doc["port"].is_number_integer() ||
      !doc["pid"].is_number_integer()) {
    return absl::DataLossError(absl::StrCat("a rendezvous record is not readable: ", text));
  }
  return RendezvousRecord{.host = doc["host"].get<std::string>(),
                          .port = doc["port"].get<int>(),
                          .pid = doc["pid"].get<int64_t>()};
}

absl::StatusOr<RendezvousRecord> StartRendezvous(const std::string& job_id, const std::string& host,
                                                 int port, const RendezvousOptions& options) {
  if (host.empty()) {
    return absl::InvalidArgumentError(
        "elastic.rendezvous.host = \"\": the address the instances reach the rendezvous at");
  }
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("elastic.rendezvous.port = ", port, ": expected 0-65535"));
  }
  static std::atomic<int> counter{0};
  const std::string ready = absl::StrCat(TempDir(), "/spotdnn-rendezvous-", job_id, "-", getpid(),
                                         "-", counter.fetch_add(1), ".ready");
  const std::string log = options.log_path.empty() ? ready + ".log" : options.log_path;
  std::filesystem::remove(ready);
  const std::string port_text = absl::StrCat(port);
  const std::string exec_failed = absl::StrCat("cannot run ", options.python, "\n");
  // Double fork: the store is nobody's child here (no zombie to reap, nothing tied to this
  // process), in a session of its own.
  const pid_t child = fork();
  if (child < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (child == 0) {
    setsid();
    if (fork() != 0) _exit(0);
    const int null_fd = open("/dev/null", O_RDONLY);
    const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(null_fd, 0);
    dup2(log_fd >= 0 ? log_fd : null_fd, 1);
    dup2(log_fd >= 0 ? log_fd : null_fd, 2);
    for (int fd = 3; fd < 1024; ++fd) close(fd);  // nothing of the caller's stays open
    execl(options.python.c_str(), options.python.c_str(), "-c", kStoreScript, kMarker,
          job_id.c_str(), port_text.c_str(), ready.c_str(), static_cast<char*>(nullptr));
    (void)!write(2, exec_failed.data(), exec_failed.size());
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  const absl::Time deadline = absl::Now() + options.start_timeout;
  while (absl::Now() < deadline) {
    const std::string text = ReadAll(ready);
    int64_t pid = 0;
    int bound = 0;
    std::vector<std::string> parts =
        absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty());
    if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &pid) &&
        absl::SimpleAtoi(parts[1], &bound)) {
      std::filesystem::remove(ready);
      return RendezvousRecord{.host = host, .port = bound, .pid = pid};
    }
    // Gone before it listened (no torch, the port taken, ...): its output says why.
    const std::string output = ReadAll(log);
    if (output.find("Traceback") != std::string::npos ||
        output.find("cannot run") != std::string::npos) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the rest of the trace
      return absl::UnavailableError(
          absl::StrCat("the rendezvous for job ", job_id, " did not start: ", Tail(log, 3)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::UnavailableError(absl::StrCat(
      "the rendezvous for job ", job_id, " did not listen within ",
      absl::FormatDuration(options.start_timeout), " (", options.python, "; output: ", log, ")"));
}

bool RendezvousAlive(const std::string& job_id, const RendezvousRecord& record) {
  return IsStoreProcess(record.pid, job_id) && Accepts(record.port);
}

int StopStaleRendezvous(const std::string& job_id, absl::Duration grace) {
  int stopped = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    int64_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    if (!IsStoreProcess(pid, job_id)) continue;
    RendezvousRecord record;
    record.pid = pid;
    (void)StopRendezvous(job_id, record, grace);
    ++stopped;
  }
  return stopped;
}

absl::Status StopRendezvous(const std::string& job_id, const RendezvousRecord& record,
                            absl::Duration grace) {
  if (!IsStoreProcess(record.pid, job_id)) return absl::OkStatus();
  const pid_t pid = static_cast<pid_t>(record.pid);
  kill(pid, SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  while (absl::Now() < deadline) {
    if (!IsStoreProcess(record.pid, job_id)) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  return absl::OkStatus();
}

}  // namespace spotdnn::job
