// The instance wrapper's supervisor: the wrapped command in its own process group with a guard
// process (the group's child subreaper) that stops it if the agent dies, its output copied line
// by line, its signals and its end (WrappedCommand), and the signal names (ParseSignal).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "services/detector/agent_log.h"
#include "services/detector/instance_wrapper.h"

extern char** environ;

namespace spotdnn::services {
namespace {

bool WriteAll(int fd, const char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

int64_t MonotonicMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

// Signals the guard leaves to the command (it cannot ignore KILL and STOP, must see CHLD, and
// faults are not forwarded signals).
bool GuardKeepsDefault(int sig) {
  return sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD || sig == SIGSEGV || sig == SIGBUS ||
         sig == SIGFPE || sig == SIGILL;
}

void NoteChildExit(int) {}

// Closes every descriptor from 3 up but `keep_a` and `keep_b` (async-signal-safe): the guard must
// not hold the agent's sockets and files open after the agent closed them or died.
void CloseAllBut(int keep_a, int keep_b) {
  const unsigned a = static_cast<unsigned>(std::min(keep_a, keep_b));
  const unsigned b = static_cast<unsigned>(std::max(keep_a, keep_b));
  auto close_from_to = [](unsigned first, unsigned last) {
    if (first > last) return;
    if (close_range(first, last, 0) == 0) return;
    // Kernels before 5.9: one by one, up to a generous limit.
    for (unsigned fd = first; fd <= last && fd < 65536; ++fd) close(static_cast<int>(fd));
  };
  if (a > 3) close_from_to(3, a - 1);
  close_from_to(a + 1, b - 1);
  close_from_to(b + 1, ~0U);
}

// What the agent writes to the guard's socket: it signalled the command's group (written before
// the signal, so the guard has it when it sees the command end of that signal).
constexpr char kSignalledByte = 's';

// The guard, in the forked child: only async-signal-safe calls from here on (the agent has
// threads). Never returns.
//
// It reports the command's wait status when the command has ended. After the agent signalled the
// group (a revocation notice, a stop), that is when every process the command started has ended
// too: a shell running the trainer (`sh -c "python3 train.py"` does not exec) dies of the notice's
// SIGTERM while the trainer goes on using its notice window, and the agent must keep forwarding
// its output and syncing its checkpoints until it ends. The guard is their child subreaper, so
// it can wait for them. Without a signal, leftovers (a daemon the command started) do not keep it.
[[noreturn]] void GuardMain(const char* path, char* const* argv, char* const* envp, int out_write,
                            int control, int64_t grace_ms) {
  setpgid(0, 0);
  CloseAllBut(out_write, control);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  struct sigaction note_child {};
  note_child.sa_handler = &NoteChildExit;
  for (int sig = 1; sig < NSIG; ++sig) {
    sigaction(sig, GuardKeepsDefault(sig) ? &fallback : &ignore, nullptr);
  }
  sigaction(SIGCHLD, &note_child, nullptr);
  // SIGCHLD is taken only inside ppoll below, so a command's exit cannot slip between the
  // waitpid and the wait.
  sigset_t none;
  sigemptyset(&none);
  sigset_t child_only;
  sigemptyset(&child_only);
  sigaddset(&child_only, SIGCHLD);
  sigprocmask(SIG_SETMASK, &child_only, nullptr);
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

  const pid_t command = fork();
  if (command == 0) {
    for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &fallback, nullptr);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(out_write, 1);
    dup2(out_write, 2);
    execve(path, argv, envp);
    static const char kFailed[] = "spotdnn-agent: exec of the command failed\n";
    WriteAll(2, kFailed, sizeof(kFailed) - 1);
    _exit(127);
  }
  close(out_write);
  if (command < 0) {
    const int status = 127 << 8;  // as if it exited 127
    WriteAll(control, reinterpret_cast<const char*>(&status), sizeof(status));
    _exit(127);
  }
  bool signalled = false;
  bool command_ended = false;
  int command_status = 0;
  // Reads what the agent wrote; false when the agent is gone.
  auto read_agent = [&] {
    char bytes[64];
    while (true) {
      const ssize_t n = recv(control, bytes, sizeof bytes, MSG_DONTWAIT);
      if (n > 0) {
        for (ssize_t i = 0; i < n; ++i) signalled = signalled || bytes[i] == kSignalledByte;
        continue;
      }
      if (n == 0) return false;
      return errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK;
    }
  };
  while (true) {
    // Reap: the command, and the processes it started that were handed to this subreaper.
    bool children_left = true;
    while (true) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid > 0) {
        if (pid == command) {
          command_ended = true;
          command_status = status;
        }
        continue;
      }
      if (pid < 0 && errno == EINTR) continue;
      children_left = pid == 0;  // -1 (ECHILD): none left
      break;
    }
    if (!read_agent()) break;  // the agent is gone
    if (command_ended && (!signalled || !children_left)) {
      WriteAll(control, reinterpret_cast<const char*>(&command_status), sizeof(command_status));
      _exit(0);
    }
    pollfd p{control, POLLIN, 0};
    ppoll(&p, 1, nullptr, &none);
  }
  // The agent died while the command ran: stop the group, as the agent would have.
  sigprocmask(SIG_SETMASK, &none, nullptr);
  kill(-getpid(), SIGTERM);
  const int64_t until = MonotonicMs() + grace_ms;
  while (MonotonicMs() < until) {
    int status = 0;
    if (command_ended || waitpid(command, &status, WNOHANG) == command) break;
    poll(nullptr, 0, 50);
  }
  kill(-getpid(), SIGKILL);  // what is left, this guard included
  _exit(1);
}

struct SignalName {
  const char* name;
  int number;
};
constexpr SignalName kSignals[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ABRT", SIGABRT},   {"KILL", SIGKILL},
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"ALRM", SIGALRM}, {"TERM", SIGTERM},   {"CONT", SIGCONT},
    {"STOP", SIGSTOP}, {"TSTP", SIGTSTP}, {"XCPU", SIGXCPU}, {"WINCH", SIGWINCH}, {"PWR", SIGPWR}};

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

}  // namespace

std::string ChildExit::Describe() const {
  if (!signaled) return absl::StrCat("exit status ", code);
  const char* what = strsignal(code);
  return absl::StrCat("killed by signal ", code, " (", what == nullptr ? "?" : what, ")");
}

absl::StatusOr<int> ParseSignal(absl::string_view field, absl::string_view text) {
  std::string name = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text));
  if (name == "NONE" || name == "0") return 0;
  int number = 0;
  if (absl::SimpleAtoi(name, &number)) {
    if (number >= 1 && number < NSIG) return number;
  } else {
    if (name.rfind("SIG", 0) == 0) name = name.substr(3);
    for (const SignalName& s : kSignals) {
      if (name == s.name) return s.number;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, " = \"", text,
                   "\": expected a signal name (TERM, INT, HUP, USR1, USR2, ...), a number 1-",
                   NSIG - 1, ", or none"));
}

absl::StatusOr<std::string> FindProgram(const std::string& name, const std::string& path_variable) {
  if (name.empty()) return absl::InvalidArgumentError("command is empty");
  auto executable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (executable(name)) return name;
    return absl::NotFoundError(
        absl::StrCat("command \"", name, "\": no executable file at that path"));
  }
  const std::string path = path_variable.empty() ? "/usr/local/bin:/usr/bin:/bin" : path_variable;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    const std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (executable(candidate)) return candidate;
  }
  return absl::NotFoundError(
      absl::StrCat("command \"", name, "\": not found on PATH (", path, ")"));
}

absl::StatusOr<std::unique_ptr<WrappedCommand>> WrappedCommand::Start(WrappedCommandOptions options,
                                                                      LineSink on_line) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError("command is empty: give it after --");
  }
  if (options.max_line < 1) options.max_line = 1;
  std::string path_variable = Env("PATH");
  for (const auto& [name, value] : options.env) {
    if (name == "PATH") path_variable = value;
  }
  absl::StatusOr<std::string> program = FindProgram(options.argv[0], path_variable);
  if (!program.ok()) return program.status();

  // Everything the forked side needs, built before the fork.
  std::vector<char*> argv;
  for (std::string& a : options.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    const absl::string_view name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [n, v] : options.env) replaced = replaced || n == name;
    if (!replaced) env_strings.emplace_back(entry);
  }
  for (const auto& [name, value] : options.env)
    env_strings.push_back(absl::StrCat(name, "=", value));
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out[2] = {-1, -1};
  int control[2] = {-1, -1};
  std::unique_ptr<WrappedCommand> command(new WrappedCommand());
  if (pipe2(out, O_CLOEXEC) != 0 ||
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control) != 0 ||
      pipe2(command->wake_fd_, O_CLOEXEC) != 0) {
    const int why = errno;
    for (int fd : {out[0], out[1], control[0], control[1]}) {
      if (fd >= 0) close(fd);
    }
    return absl::InternalError(absl::StrCat("cannot create the command's pipes: ", strerror(why)));
  }
  const int64_t grace_ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(options.orphan_grace));
  const pid_t guard = fork();
  if (guard == 0) {
    close(out[0]);
    close(control[0]);
    close(command->wake_fd_[0]);
    close(command->wake_fd_[1]);
    GuardMain(program->c_str(), argv.data(), envp.data(), out[1], control[1], grace_ms);
  }
  const int fork_errno = errno;
  close(out[1]);
  close(control[1]);
  if (guard < 0) {
    close(out[0]);
    close(control[0]);
    return absl::InternalError(absl::StrCat("cannot fork the command: ", strerror(fork_errno)));
  }
  // Both sides set the group, so that a signal sent right away reaches it.
  setpgid(guard, guard);
  command->options_ = std::move(options);
  command->on_line_ = std::move(on_line);
  command->guard_pid_ = guard;
  command->control_fd_ = control[0];
  command->output_fd_ = out[0];
  command->pump_ = std::thread([p = command.get()] { p->Pump(); });
  return command;
}

WrappedCommand::~WrappedCommand() {
  bool running = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running = !exit_.has_value();
  }
  if (running && guard_pid_ > 0) {
    kill(-guard_pid_, SIGKILL);
    Wait(absl::Seconds(5));
  }
  FinishOutput(absl::ZeroDuration());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!guard_reaped_ && guard_pid_ > 0) waitpid(guard_pid_, nullptr, WNOHANG);
  }
  if (control_fd_ >= 0) close(control_fd_);
  if (output_fd_ >= 0) close(output_fd_);
  for (int fd : wake_fd_) {
    if (fd >= 0) close(fd);
  }
}

absl::Status WrappedCommand::Signal(int signal) {
  if (signal == 0) return absl::OkStatus();
  // First the guard hears of it: it then waits for every process the command started.
  (void)send(control_fd_, &kSignalledByte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (kill(-guard_pid_, signal) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("signal ", signal, " to process group ", guard_pid_, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

std::optional<ChildExit> WrappedCommand::Wait(absl::Duration timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (exit_) return exit_;
  pollfd p{control_fd_, POLLIN, 0};
  const int ms = static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 0, std::numeric_limits<int>::max()));
  const int ready = poll(&p, 1, ms);
  if (ready <= 0) return std::nullopt;
  int status = 0;
  size_t got = 0;
  while (got < sizeof(status)) {
    const ssize_t n =
        read(control_fd_, reinterpret_cast<char*>(&status) + got, sizeof(status) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  int guard_status = 0;
  const bool reaped = waitpid(guard_pid_, &guard_status, 0) == guard_pid_;
  guard_reaped_ = true;
  if (got < sizeof(status)) {
    // The guard ended without a report (someone killed it): its own end is all there is, and a
    // command nothing watches any more is stopped.
    status = reaped ? guard_status : (1 << 8);
    kill(-guard_pid_, SIGKILL);
  }
  ChildExit e;
  if (WIFSIGNALED(status)) {
    e.signaled = true;
    e.code = WTERMSIG(status);
  } else {
    e.code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  exit_ = e;
  return exit_;
}

bool WrappedCommand::FinishOutput(absl::Duration timeout) {
  const auto until = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  while (!output_done_.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const bool done = output_done_.load();
  if (pump_.joinable()) {
    if (!done && wake_fd_[1] >= 0) {
      const char byte = 1;
      WriteAll(wake_fd_[1], &byte, 1);
    }
    pump_.join();
  }
  return done;
}

void WrappedCommand::Pump() {
  std::string buffer;
  auto emit_one = [this](absl::string_view line) {
    if (options_.output_fd >= 0) {
      std::string copy(line);
      copy.push_back('\n');
      WriteAll(options_.output_fd, copy.data(), copy.size());
    }
    lines_.fetch_add(1);
    if (on_line_) on_line_(line);
  };
  // A line longer than max_line goes on in pieces of max_line, however the reads cut it.
  auto emit = [this, &emit_one](absl::string_view line) {
    do {
      emit_one(line.substr(0, options_.max_line));
      line.remove_prefix(std::min(line.size(), options_.max_line));
    } while (!line.empty());
  };
  char chunk[65536];
  while (true) {
    pollfd fds[2] = {{output_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) break;  // FinishOutput gave up waiting
    const ssize_t n = read(output_fd_, chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      break;
    }
    if (n == 0) {
      output_done_.store(true);
      break;
    }
    buffer.append(chunk, static_cast<size_t>(n));
    size_t start = 0;
    while (true) {
      const size_t newline = buffer.find('\n', start);
      if (newline == std::string::npos) break;
      absl::string_view line(buffer.data() + start, newline - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      emit(line);
      start = newline + 1;
    }
    buffer.erase(0, start);
    while (buffer.size() >= options_.max_line) {
      emit(absl::string_view(buffer.data(), options_.max_line));
      buffer.erase(0, options_.max_line);
    }
  }
  if (!buffer.empty()) emit(buffer);  // a last line without its newline
}

}  // namespace spotdnn::services
