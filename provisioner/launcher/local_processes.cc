// The local instances' processes: a command started in a process group of its own, liveness read
// from /proc, stopping (SIGTERM, then SIGKILL), and the reaper that kills an owner's groups when
// the owner dies without doing so.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "provisioner/launcher/local_provider.h"
#include "provisioner/launcher/local_provider_record.h"
#include "provisioner/launcher/vm_script.h"

extern char** environ;

namespace spotdnn::launcher {
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

}  // namespace

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

absl::StatusOr<pid_t> LocalProvider::Spawn(const std::string& command,
                                           const std::map<std::string, std::string>& env,
                                           const std::string& log) {
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
  std::string line = options_.wrapper.empty()
                         ? command
                         : absl::StrCat("exec ", options_.wrapper, " ", options_.shell, " -c ",
                                        ShellQuote(command));
  char* argv[] = {shell.data(), dash_c.data(), line.data(), nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
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
  if (rc != 0) return absl::InternalError(std::strerror(rc));
  return pid;
}

}  // namespace spotdnn::launcher
