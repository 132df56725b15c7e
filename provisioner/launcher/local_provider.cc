#include "provisioner/launcher/local_provider.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/files.h"
#include "provisioner/launcher/aws_provider.h"
#include "provisioner/launcher/sigv4.h"
#include "provisioner/launcher/vm_script.h"

extern char** environ;

namespace spotdnn::launcher {

namespace fs = std::filesystem;

// One instance's file: key=value lines.
struct LocalProvider::Record {
  std::string id;
  std::string job_id;
  std::string instance_type;
  Role role = Role::kWorker;
  int index = 0;
  pid_t pgid = 0;  // also the pid of the group's leader (/bin/sh -c COMMAND)
  std::string metadata_endpoint;
  std::string metadata_control;
  std::string client_token;
  std::string service_address;  // a parameter server's host:port
  int64_t launch_unix_ms = 0;
  int64_t end_unix_ms = 0;     // when a revocation stopped it (0: not revoked, or not yet)
  int64_t revoke_unix_ms = 0;  // when a revocation's notice runs out (0: not revoked)
  Market market = Market::kSpot;
  bool terminated = false;

  std::string Serialize() const {
    return absl::StrCat("id=", id, "\njob_id=", job_id, "\ninstance_type=", instance_type,
                        "\nrole=", RoleName(role), "\nindex=", index, "\npgid=", pgid,
                        "\nmetadata_endpoint=", metadata_endpoint,
                        "\nmetadata_control=", metadata_control, "\nclient_token=", client_token,
                        "\nservice_address=", service_address, "\nlaunch_unix_ms=", launch_unix_ms,
                        "\nend_unix_ms=", end_unix_ms, "\nrevoke_unix_ms=", revoke_unix_ms,
                        "\nmarket=", MarketName(market),
                        "\nstate=", terminated ? "terminated" : "running", "\n");
  }

  static absl::StatusOr<Record> Parse(const std::string& text, const std::string& path) {
    std::map<std::string, std::string> kv;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      size_t eq = line.find('=');
      if (eq == absl::string_view::npos) continue;
      kv[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
    Record r;
    r.id = kv["id"];
    r.job_id = kv["job_id"];
    r.instance_type = kv["instance_type"];
    absl::StatusOr<Role> role = ParseRole(kv["role"]);
    int pgid = 0;
    if (r.id.empty() || !role.ok() || !absl::SimpleAtoi(kv["pgid"], &pgid) || pgid <= 1 ||
        !absl::SimpleAtoi(kv["index"], &r.index)) {
      return absl::DataLossError(absl::StrCat(path, ": not a spotdnn local instance file"));
    }
    r.role = *role;
    r.pgid = pgid;
    r.metadata_endpoint = kv["metadata_endpoint"];
    r.metadata_control = kv["metadata_control"];
    r.client_token = kv["client_token"];
    r.service_address = kv["service_address"];
    (void)absl::SimpleAtoi(kv["launch_unix_ms"], &r.launch_unix_ms);
    (void)absl::SimpleAtoi(kv["end_unix_ms"], &r.end_unix_ms);
    (void)absl::SimpleAtoi(kv["revoke_unix_ms"], &r.revoke_unix_ms);
    r.market = kv["market"] == "on-demand" ? Market::kOnDemand : Market::kSpot;
    r.terminated = kv["state"] == "terminated";
    return r;
  }

  Instance ToInstance(bool alive) const {
    Instance i;
    i.id = id;
    i.instance_type = instance_type;
    i.state = !terminated && alive ? InstanceState::kRunning : InstanceState::kTerminated;
    i.job_id = job_id;
    i.role = role;
    i.index = index;
    i.private_address = "127.0.0.1";
    i.metadata_endpoint = metadata_endpoint;
    i.service_address = service_address;
    i.launch_time = absl::FromUnixMillis(launch_unix_ms);
    i.market = market;
    if (end_unix_ms > 0) i.end_time = absl::FromUnixMillis(end_unix_ms);
    return i;
  }
};

namespace {

// A /proc file's contents, "" when it cannot be read. With read(2), not an ifstream: a process
// that exits between the open and the read makes read fail with ESRCH, which libstdc++'s filebuf
// throws as std::ios_base::failure from underflow whatever the stream's exception mask (it ended
// `spotdnn run` with "terminate called ... No such process" under load).
std::string ReadProcFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      out.append(buffer, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      if (n < 0) out.clear();
      break;
    }
  }
  ::close(fd);
  return out;
}

// True while some process of group `pgid` is alive and not a zombie (/proc scan: a zombie
// leader still answers kill(-pgid, 0)).
bool GroupHasLiveMember(pid_t pgid) {
  if (kill(-pgid, 0) != 0 && errno == ESRCH) return false;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return true;
  bool live = false;
  while (dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    const std::string stat = ReadProcFile(absl::StrCat("/proc/", pid, "/stat"));
    size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    // After "pid (comm) ": state ppid pgrp ...
    std::vector<std::string> fields = absl::StrSplit(stat.substr(paren + 2), ' ');
    int pgrp = 0;
    if (fields.size() < 3 || !absl::SimpleAtoi(fields[2], &pgrp) || pgrp != pgid) continue;
    if (fields[0] != "Z" && fields[0] != "X") {
      live = true;
      break;
    }
  }
  closedir(proc);
  return live;
}

std::string RandomId() {
  std::random_device device;
  std::mt19937_64 rng(device());
  return absl::StrCat("i-local-", Sha256Hex(absl::StrCat(rng(), getpid())).substr(0, 12));
}

}  // namespace

std::string DefaultLocalStateDir() {
  if (const char* home = std::getenv("SPOTDNN_HOME"); home != nullptr && *home != '\0') {
    return absl::StrCat(home, "/local");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return absl::StrCat(home, "/.spotdnn/local");
  }
  return ".spotdnn/local";
}

EmulatorMetadataClient::EmulatorMetadataClient(std::string base_url)
    : base_url_(std::move(base_url)) {
  while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
}

std::string EmulatorMetadataClient::EndpointFor(const std::string& instance_id) const {
  return absl::StrCat(base_url_, "/i/", instance_id);
}

absl::Status EmulatorMetadataClient::PublishSpotNotice(const std::string& instance_id,
                                                       absl::Time action_time) {
  int64_t effective_ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(action_time - absl::Now()));
  std::string url = absl::StrCat(
      base_url_, "/emulator/notice?instance=", UriEncode(instance_id, false),
      "&cloud=aws&kind=notice&action=terminate&in_ms=0&effective_in_ms=", effective_ms);
  absl::StatusOr<HttpResponse> response =
      HttpSend({.method = "POST", .url = url, .timeout = absl::Seconds(5)});
  if (!response.ok()) {
    return absl::UnavailableError(absl::StrCat("metadata emulator at ", base_url_,
                                               " is not reachable: ", response.status().message()));
  }
  if (response->status != 200) {
    return absl::UnavailableError(absl::StrCat("metadata emulator at ", base_url_,
                                               " refused the notice for ", instance_id, ": HTTP ",
                                               response->status, " ", response->body));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LocalProvider>> LocalProvider::Create(Options options) {
  if (options.state_dir.empty()) return absl::InvalidArgumentError("state_dir is empty");
  std::error_code ec;
  fs::create_directories(options.state_dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("state_dir = \"", options.state_dir, "\": ", ec.message()));
  }
  if (!options.capacity_trace.empty()) {
    if (!(options.capacity_trace_time_scale > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("capacity_trace_time_scale = ", options.capacity_trace_time_scale,
                       ": expected trace seconds per second > 0"));
    }
    if (options.capacity_trace_origin == absl::InfinitePast()) {
      // Kept in the state dir, per job: every process that runs the job's instances reads the
      // same trace time. A new job starts the trace afresh (the time an earlier job kept there
      // would be its end, or past it: nothing would be replayed).
      const std::string path =
          CapacityTraceOriginPath(options.state_dir, options.capacity_trace_job);
      int64_t origin_ms = 0;
      std::ifstream in(path);
      std::string text;
      if (!options.capacity_trace_resume ||
          !(in && std::getline(in, text) && absl::SimpleAtoi(text, &origin_ms))) {
        origin_ms = absl::ToUnixMillis(absl::Now());
        std::ofstream out(path, std::ios::trunc);
        out << origin_ms << "\n";
        if (!out) {
          return absl::InternalError(absl::StrCat("capacity trace: cannot write ", path));
        }
      }
      options.capacity_trace_origin = absl::FromUnixMillis(origin_ms);
    }
    if (options.trace_notice == absl::ZeroDuration()) {
      options.trace_notice =
          std::max(absl::Seconds(3), absl::Minutes(2) / options.capacity_trace_time_scale);
    }
  }
  std::unique_ptr<LocalProvider> provider(new LocalProvider(std::move(options)));
  if (provider->options_.owner && !provider->options_.detached) {
    if (absl::Status s = provider->StartReaper(); !s.ok()) return s;
  }
  return provider;
}

LocalProvider::LocalProvider(Options options) : options_(std::move(options)) {}

LocalProvider::~LocalProvider() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
  }
  revocations_done_.notify_all();
  for (std::thread& t : revokers_) t.join();
  if (options_.owner && !options_.detached) {
    std::vector<std::string> mine;
    for (const Record& r : LoadAll()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (launched_.count(r.pgid) > 0) mine.push_back(r.id);
    }
    (void)Terminate(mine);
  }
  if (reaper_fd_ >= 0) close(reaper_fd_);  // EOF: the reaper kills what is left, then exits
  if (reaper_pid_ > 0) waitpid(reaper_pid_, nullptr, 0);
}

absl::Status LocalProvider::StartReaper() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("reaper pipe: ", std::strerror(errno)));
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("reaper fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // The reaper. Only async-signal-safe calls from here: the parent may have threads.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) sigaction(sig, &ignore, nullptr);
    if (fds[0] != 3) dup2(fds[0], 3);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
      dup2(devnull, 2);
    }
    for (int fd = 4; fd < 4096; ++fd) close(fd);  // sockets, the pipe's write end, ...
    int32_t groups[4096];
    int count = 0;
    while (true) {
      int32_t value = 0;
      ssize_t n = read(3, &value, sizeof value);
      if (n < 0 && errno == EINTR) continue;
      if (n != static_cast<ssize_t>(sizeof value)) break;  // EOF: the owner is gone
      if (value > 0 && count < 4096) {
        groups[count++] = value;
      } else if (value < 0) {
        for (int i = 0; i < count; ++i) {
          if (groups[i] == -value) groups[i--] = groups[--count];
        }
      }
    }
    for (int i = 0; i < count; ++i) kill(-groups[i], SIGKILL);
    _exit(0);
  }
  close(fds[0]);
  reaper_fd_ = fds[1];
  reaper_pid_ = pid;
  return absl::OkStatus();
}

void LocalProvider::TellReaper(pid_t pgid, bool add) {
  if (reaper_fd_ < 0) return;
  int32_t value = add ? pgid : -pgid;
  ssize_t n;
  do {
    n = write(reaper_fd_, &value, sizeof value);
  } while (n < 0 && errno == EINTR);
}

std::string LocalProvider::PathFor(const std::string& instance_id, const char* suffix) const {
  return absl::StrCat(options_.state_dir, "/", instance_id, suffix);
}

absl::StatusOr<LocalProvider::Record> LocalProvider::Load(const std::string& instance_id) const {
  for (char c : instance_id) {
    if (c == '/' || c == '\0') {
      return absl::InvalidArgumentError(absl::StrCat("instance id = \"", instance_id, "\""));
    }
  }
  std::string path = PathFor(instance_id, ".instance");
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("instance ", instance_id, " is not known in ", options_.state_dir));
  }
  std::stringstream text;
  text << in.rdbuf();
  return Record::Parse(text.str(), path);
}

std::vector<LocalProvider::Record> LocalProvider::LoadAll() const {
  std::vector<Record> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.state_dir, ec)) {
    if (entry.path().extension() != ".instance") continue;
    absl::StatusOr<Record> r = Load(entry.path().stem().string());
    if (r.ok()) out.push_back(std::move(*r));
  }
  std::sort(out.begin(), out.end(), [](const Record& a, const Record& b) {
    return std::tie(a.job_id, a.role, a.index, a.id) < std::tie(b.job_id, b.role, b.index, b.id);
  });
  return out;
}

absl::Status LocalProvider::Save(const Record& record) const {
  std::string path = PathFor(record.id, ".instance");
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << record.Serialize();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot write ", path, ": ", ec.message()));
  return absl::OkStatus();
}

void LocalProvider::ReapOwned() {
  // Our own children that exited (or were stopped by another process) must not linger as
  // zombies, whether or not their files are still there.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = owned_.begin(); it != owned_.end();) {
    if (waitpid(*it, nullptr, WNOHANG) == *it) {
      it = owned_.erase(it);
    } else {
      ++it;
    }
  }
}

bool LocalProvider::Alive(const Record& record) {
  ReapOwned();
  return GroupHasLiveMember(record.pgid);
}

void LocalProvider::Stop(const Record& record) {
  auto wait_gone = [&](absl::Duration limit) {
    absl::Time deadline = absl::Now() + limit;
    while (Alive(record)) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return true;
  };
  if (Alive(record)) {
    kill(-record.pgid, SIGTERM);
    if (!wait_gone(options_.stop_grace)) {
      kill(-record.pgid, SIGKILL);
      wait_gone(absl::Seconds(5));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (owned_.count(record.pgid) > 0) {
      waitpid(record.pgid, nullptr, 0);
      owned_.erase(record.pgid);
    }
    launched_.erase(record.pgid);
  }
  TellReaper(record.pgid, false);
}

absl::StatusOr<LaunchResult> LocalProvider::Launch(const LaunchRequest& request) {
  if (absl::Status s = ValidateLaunchRequest(request); !s.ok()) return s;
  if (!options_.owner) {
    return absl::FailedPreconditionError("this local provider only watches; it cannot launch");
  }
  if (request.command.empty()) return absl::InvalidArgumentError("command is empty");
  std::string token =
      request.client_token.empty() ? DefaultClientToken(request) : request.client_token;
  LaunchResult result;
  result.requested = request.count;
  if (absl::Status s = ApplyCapacityTrace(); !s.ok()) return s;
  // On-demand instances are not limited by spot capacity (and do not use it up).
  const int capacity =
      request.market == Market::kSpot ? SpotCapacityNow(request.instance_type) : -1;
  const bool capped = capacity >= 0;
  int running = 0;  // spot instances of the type not being revoked, when capacity is limited
  for (const Record& r : LoadAll()) {
    if (r.client_token == token && r.job_id == request.job_id) {
      result.instances.push_back(r.ToInstance(Alive(r)));
    } else if (capped && r.instance_type == request.instance_type && r.market == Market::kSpot &&
               r.revoke_unix_ms == 0 && !r.terminated && Alive(r)) {
      ++running;
    }
  }
  if (!result.instances.empty()) return result;  // launched before with this token

  int fits = request.count;
  if (capped) {
    fits = std::clamp(capacity - running, 0, request.count);
    if (fits < request.count) {
      result.error = absl::ResourceExhaustedError(absl::StrCat(
          "local: InsufficientInstanceCapacity: ", request.instance_type, " has spot capacity for ",
          capacity, " instance(s), ", running, " running; launched ", fits, " of ", request.count,
          "; re-plan without instance type ", request.instance_type, " or launch it on-demand"));
      if (fits == 0) return result.error;
    }
  }
  // Parameter servers share 127.0.0.1: each needs a port of its own, known to all before any
  // starts (every server gets the whole list).
  LaunchRequest effective = request;
  if (request.role == Role::kParameterServer && request.ps_addresses.empty()) {
    for (int i = 0; i < fits; ++i) {
      absl::StatusOr<int> port = FreeLoopbackPort();
      if (!port.ok()) return port.status();
      effective.ps_addresses.push_back(absl::StrCat("127.0.0.1:", *port));
    }
  }
  for (int i = 0; i < fits; ++i) {
    Record record;
    record.id = RandomId();
    record.job_id = request.job_id;
    record.instance_type = request.instance_type;
    record.role = request.role;
    record.index = request.first_index + i;
    record.client_token = token;
    record.market = request.market;
    record.launch_unix_ms = absl::ToUnixMillis(absl::Now());
    if (options_.metadata != nullptr) {
      record.metadata_endpoint = options_.metadata->EndpointFor(record.id);
      record.metadata_control = options_.metadata->ControlUrl();
    }
    std::map<std::string, std::string> env =
        InstanceEnvironment(effective, record.index, record.id, record.metadata_endpoint);
    if (request.role == Role::kParameterServer &&
        i < static_cast<int>(effective.ps_addresses.size())) {
      record.service_address = effective.ps_addresses[i];
      const size_t colon = record.service_address.rfind(':');
      env["SPOTDNN_PS_PORT"] = record.service_address.substr(colon + 1);
    }
    // The parent's environment, then ours on top.
    std::map<std::string, std::string> merged;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      absl::string_view entry(*e);
      size_t eq = entry.find('=');
      if (eq == absl::string_view::npos) continue;
      merged[std::string(entry.substr(0, eq))] = std::string(entry.substr(eq + 1));
    }
    for (auto& [k, v] : env) merged[k] = v;
    if (!options_.bin_dir.empty()) {
      const std::string path = merged["PATH"];
      merged["PATH"] = path.empty() ? options_.bin_dir : absl::StrCat(options_.bin_dir, ":", path);
    }
    std::vector<std::string> env_strings;
    for (auto& [k, v] : merged) env_strings.push_back(absl::StrCat(k, "=", v));
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);

    std::string shell = options_.shell;
    std::string dash_c = "-c";
    std::string command = options_.wrapper.empty()
                              ? request.command
                              : absl::StrCat("exec ", options_.wrapper, " ", options_.shell, " -c ",
                                             ShellQuote(request.command));
    char* argv[] = {shell.data(), dash_c.data(), command.data(), nullptr};
    std::string log = PathFor(record.id, ".log");

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);  // its own process group
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    sigset_t defaults;
    sigemptyset(&defaults);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2}) {
      sigaddset(&defaults, sig);
    }
    posix_spawnattr_setsigdefault(&attr, &defaults);
    pid_t pid = 0;
    int rc;
    {
      std::lock_guard<std::mutex> lock(mu_);
      rc = posix_spawn(&pid, shell.c_str(), &actions, &attr, argv, envp.data());
      if (rc == 0) {
        owned_.insert(pid);
        launched_.insert(pid);
      }
    }
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      result.error =
          absl::InternalError(absl::StrCat("cannot start ", options_.shell, " for instance ", i,
                                           " of ", request.count, ": ", std::strerror(rc)));
      break;
    }
    TellReaper(pid, true);
    record.pgid = pid;
    if (absl::Status s = Save(record); !s.ok()) {
      kill(-pid, SIGKILL);
      result.error = s;
      break;
    }
    result.instances.push_back(record.ToInstance(true));
  }
  if (result.instances.empty() && !result.error.ok()) return result.error;
  return result;
}

std::string LocalProvider::OutputLocation() const {
  return (fs::path(options_.state_dir) / "logs").string();
}

std::string CapacityTraceOriginPath(const std::string& state_dir, const std::string& job) {
  return (fs::path(state_dir) /
          (job.empty() ? std::string("capacity_trace_origin") : "capacity_trace_origin." + job))
      .string();
}

absl::StatusOr<int> FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket(): ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return absl::InternalError(absl::StrCat("cannot find a free local port: ", why));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

absl::StatusOr<std::vector<Instance>> LocalProvider::Describe(const std::string& job_id) {
  if (absl::Status s = ApplyCapacityTrace(); !s.ok()) return s;
  ReapOwned();
  std::vector<Instance> out;
  for (const Record& r : LoadAll()) {
    if (!job_id.empty() && r.job_id != job_id) continue;
    out.push_back(r.ToInstance(!r.terminated && Alive(r)));
    // Gone by itself (not terminated, not revoked): did its command end, or was it killed with
    // its agent?
    if (out.back().state == InstanceState::kTerminated && !r.terminated && r.revoke_unix_ms == 0) {
      out.back().command_end =
          CommandEndFromLog(base::FileTail(PathFor(r.id, ".log"), 64 << 10), 20);
    }
  }
  return out;
}

absl::Status LocalProvider::Terminate(const std::vector<std::string>& instance_ids) {
  std::vector<Record> records;
  std::vector<std::string> unknown;
  for (const std::string& id : instance_ids) {
    absl::StatusOr<Record> r = Load(id);
    if (r.ok()) {
      records.push_back(std::move(*r));
    } else {
      unknown.push_back(id);
    }
  }
  for (const Record& r : records) {
    Stop(r);
    std::error_code ec;
    fs::remove(PathFor(r.id, ".instance"), ec);
    // The output stays, for whoever asks why an instance failed: STATE_DIR/logs/ID.log.
    fs::create_directories(fs::path(options_.state_dir) / "logs", ec);
    fs::rename(PathFor(r.id, ".log"), fs::path(options_.state_dir) / "logs" / (r.id + ".log"), ec);
    if (ec) fs::remove(PathFor(r.id, ".log"), ec);
  }
  if (!unknown.empty()) {
    return absl::NotFoundError(
        absl::StrCat("unknown local instance(s): ", absl::StrJoin(unknown, ", "), " (state dir ",
                     options_.state_dir, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SpotPrice>> LocalProvider::SpotPrices(const std::vector<std::string>&,
                                                                 const std::string&) {
  return absl::UnimplementedError("the local provider has no spot market; use --provider aws");
}

absl::Status LocalProvider::Revoke(const std::string& instance_id, absl::Duration notice) {
  absl::StatusOr<Record> record = Load(instance_id);
  if (!record.ok()) return record.status();
  if (record->terminated || !Alive(*record)) {
    return absl::FailedPreconditionError(absl::StrCat("instance ", instance_id, " is not running"));
  }
  if (record->market == Market::kOnDemand) {
    return absl::FailedPreconditionError(absl::StrCat(
        "instance ", instance_id, " is on-demand: on-demand instances are not revoked"));
  }
  if (notice < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("notice = ", absl::FormatDuration(notice), ": must be >= 0"));
  }
  return RevokeRecord(*std::move(record), notice);
}

absl::Status LocalProvider::RevokeRecord(Record record, absl::Duration notice) {
  const std::string instance_id = record.id;
  absl::Time action_time = absl::Now() + notice;
  std::shared_ptr<LocalMetadataService> metadata = options_.metadata;
  if (metadata == nullptr && !record.metadata_control.empty()) {
    metadata = std::make_shared<EmulatorMetadataClient>(record.metadata_control);
  }
  if (metadata != nullptr) {
    if (absl::Status s = metadata->PublishSpotNotice(instance_id, action_time); !s.ok()) return s;
  } else if (!options_.allow_revoke_without_metadata) {
    return absl::FailedPreconditionError(absl::StrCat(
        "instance ", instance_id, " has no metadata endpoint to publish the notice on"));
  }
  // On record, so that a process after this one stops it if this one is gone by then.
  record.revoke_unix_ms = absl::ToUnixMillis(action_time);
  if (absl::Status s = Save(record); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  ++pending_revocations_;
  revoking_here_.insert(record.id);
  revokers_.emplace_back([this, r = record, action_time]() mutable {
    {
      std::unique_lock<std::mutex> wait_lock(mu_);
      revocations_done_.wait_until(wait_lock, absl::ToChronoTime(action_time),
                                   [this] { return shutting_down_; });
    }
    Stop(r);
    r.terminated = true;
    r.end_unix_ms = absl::ToUnixMillis(absl::Now());
    // Terminate() may have removed the file meanwhile: nothing to write then.
    if (std::filesystem::exists(PathFor(r.id, ".instance"))) (void)Save(r);
    std::lock_guard<std::mutex> done_lock(mu_);
    --pending_revocations_;
    revocations_done_.notify_all();
  });
  return absl::OkStatus();
}

double LocalProvider::TraceTimeNow() const {
  return absl::ToDoubleSeconds(absl::Now() - options_.capacity_trace_origin) *
         options_.capacity_trace_time_scale;
}

int LocalProvider::SpotCapacityNow(const std::string& instance_type) {
  int capacity = -1;
  if (auto cap = options_.capacity.find(instance_type); cap != options_.capacity.end()) {
    capacity = cap->second;
  }
  if (auto trace = options_.capacity_trace.find(instance_type);
      trace != options_.capacity_trace.end()) {
    const int count = trace->second.CountAt(TraceTimeNow());
    capacity = capacity < 0 ? count : std::min(capacity, count);
  }
  return capacity;
}

absl::Status LocalProvider::ApplyCapacityTrace() {
  if (options_.capacity_trace.empty() || !options_.owner) return absl::OkStatus();
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  std::map<std::string, std::vector<Record>> spot;  // type -> running spot, not revoked
  for (Record& r : LoadAll()) {
    if (r.terminated || r.market != Market::kSpot) continue;
    if (r.revoke_unix_ms > 0) {
      // Revoked by a process that is gone (its stop thread with it): stop it now.
      bool scheduled_here;
      {
        std::lock_guard<std::mutex> lock(mu_);
        scheduled_here = revoking_here_.count(r.id) > 0;
      }
      if (!scheduled_here && r.revoke_unix_ms <= now_ms && Alive(r)) {
        Stop(r);
        r.terminated = true;
        r.end_unix_ms = now_ms;
        if (absl::Status s = Save(r); !s.ok()) return s;
      }
      continue;
    }
    if (options_.capacity_trace.count(r.instance_type) > 0 && Alive(r)) {
      spot[r.instance_type].push_back(std::move(r));
    }
  }
  for (auto& [type, running] : spot) {
    const int capacity = std::max(0, SpotCapacityNow(type));
    if (static_cast<int>(running.size()) <= capacity) continue;
    // The newest go first.
    std::sort(running.begin(), running.end(), [](const Record& a, const Record& b) {
      return std::tie(a.launch_unix_ms, a.id) > std::tie(b.launch_unix_ms, b.id);
    });
    for (size_t i = 0; i < running.size() - static_cast<size_t>(capacity); ++i) {
      if (absl::Status s = RevokeRecord(running[i], options_.trace_notice); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

void LocalProvider::WaitForRevocations() {
  std::unique_lock<std::mutex> lock(mu_);
  revocations_done_.wait(lock, [this] { return pending_revocations_ == 0; });
}

absl::StatusOr<pid_t> LocalProvider::ProcessGroup(const std::string& instance_id) {
  absl::StatusOr<Record> record = Load(instance_id);
  if (!record.ok()) return record.status();
  if (record->terminated || !Alive(*record)) {
    return absl::NotFoundError(absl::StrCat("instance ", instance_id, " is not running"));
  }
  return record->pgid;
}

}  // namespace spotdnn::launcher
