#include "services/detector/instance_wrapper.h"

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
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/clock.h"
#include "nlohmann/json.hpp"
#include "profiler/importers.h"
#include "profiler/sample.h"
#include "provisioner/launcher/aws_provider.h"
#include "provisioner/launcher/checkpoint_sync.h"
#include "provisioner/launcher/s3_client.h"
#include "services/profiler/sample_convert.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace spotdnn::services {
namespace {

std::shared_ptr<spdlog::logger> Logger() {
  auto logger = spdlog::get("spotdnn-agent");
  return logger ? logger : spdlog::default_logger();
}

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

std::optional<v1::Sample> SampleLineReader::Read(absl::string_view line) {
  ++lines_;
  absl::StatusOr<std::optional<profiler::Sample>> parsed = profiler::ParseSampleLine(line);
  auto malformed = [&](absl::string_view reason) -> std::optional<v1::Sample> {
    ++malformed_;
    if (static_cast<int>(reasons_.size()) < max_reasons_) {
      reasons_.push_back(absl::StrCat("line ", lines_, ": ", reason));
    }
    return std::nullopt;
  };
  if (parsed.ok() && !parsed->has_value()) return std::nullopt;
  ++sample_lines_;
  if (!parsed.ok()) return malformed(parsed.status().message());
  profiler::Sample s = **parsed;
  if (s.job_id.empty()) s.job_id = defaults_.job_id;
  if (s.worker_id.empty()) s.worker_id = defaults_.worker_id;
  if (s.instance_type.empty()) s.instance_type = defaults_.instance_type;
  if (s.cluster_workers == 0) s.cluster_workers = defaults_.cluster_workers;
  if (s.batch_size == 0) s.batch_size = defaults_.batch_size;
  if (s.job_id.empty()) {
    return malformed("job_id is empty: give job_id= in the line, or SPOTDNN_JOB_ID (--job_id)");
  }
  if (absl::Status v = profiler::ValidateSample(s); !v.ok()) return malformed(v.message());
  return ToProto(s);
}

std::string NoticeFileJson(const NoticeInfo& notice) {
  nlohmann::ordered_json j;
  j["kind"] = "notice";
  j["action"] = notice.action;
  j["cloud"] = notice.cloud;
  j["instance_id"] = notice.instance_id;
  j["notice_unix_ms"] = notice.notice_unix_ms;
  j["deadline_unix_ms"] = notice.deadline_unix_ms;
  j["deadline"] =
      notice.deadline_unix_ms > 0
          ? absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(notice.deadline_unix_ms),
                             absl::UTCTimeZone())
          : "";
  return j.dump() + "\n";
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view content) {
  return launcher::WriteFileAtomically(path, content);
}

namespace {

// Delivers notices to the command: the file first, then the signal. A notice read before the
// command started is signalled as soon as it starts.
class NoticeDelivery {
 public:
  NoticeDelivery(std::string file, int signal, std::string cloud, std::string instance_id)
      : file_(std::move(file)),
        signal_(signal),
        cloud_(std::move(cloud)),
        instance_id_(std::move(instance_id)) {}

  void OnNotice(const detector::Notice& n) {
    auto logger = Logger();
    if (n.kind != detector::EventKind::kNotice) {
      logger->info("metadata event {} ({}) is not a revocation notice: not passed to the command",
                   n.action, n.detail);
      return;
    }
    NoticeInfo info{.action = n.action,
                    .cloud = cloud_,
                    .instance_id = instance_id_,
                    .notice_unix_ms = base::RealClock::Get().NowUnixMs(),
                    .deadline_unix_ms = n.effective_unix_ms};
    if (absl::Status s = WriteFileAtomically(file_, NoticeFileJson(info)); !s.ok()) {
      logger->error("notice file: {}", std::string(s.message()));
    }
    std::lock_guard<std::mutex> lock(mu_);
    noticed_ = true;
    const int64_t left = n.effective_unix_ms > 0 ? n.effective_unix_ms - info.notice_unix_ms : 0;
    logger->warn("revocation notice: {} {}; notice file {} written{}", n.action,
                 n.effective_unix_ms > 0 ? absl::StrCat("in ", left, " ms") : "(no deadline given)",
                 file_,
                 signal_ == 0 ? "; no signal (--notice_signal=none)"
                              : absl::StrCat("; signal ", signal_, " to the command"));
    if (command_ != nullptr) SignalLocked();
  }

  void SetCommand(WrappedCommand* command) {
    std::lock_guard<std::mutex> lock(mu_);
    command_ = command;
    if (noticed_ && command_ != nullptr) SignalLocked();
  }

  bool noticed() {
    std::lock_guard<std::mutex> lock(mu_);
    return noticed_;
  }

 private:
  void SignalLocked() {
    if (signal_ == 0) return;
    if (absl::Status s = command_->Signal(signal_); !s.ok()) {
      Logger()->warn("notice signal: {}", std::string(s.message()));
    }
  }

  const std::string file_;
  const int signal_;
  const std::string cloud_;
  const std::string instance_id_;
  std::mutex mu_;
  bool noticed_ = false;
  WrappedCommand* command_ = nullptr;
};

// Uploads the checkpoint folder every interval (every second once a notice came) on a thread.
class CheckpointUploader {
 public:
  CheckpointUploader(launcher::CheckpointSync* sync, absl::Duration interval,
                     std::function<bool()> urgent)
      : sync_(sync), interval_(interval), urgent_(std::move(urgent)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~CheckpointUploader() { Stop(); }
  // Stops the thread, then uploads once more (what the command wrote last).
  void Finish() {
    Stop();
    Round("final");
  }

 private:
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      const absl::Duration wait = urgent_() ? std::min(interval_, absl::Seconds(1)) : interval_;
      cv_.wait_for(lock, absl::ToChronoNanoseconds(wait), [this] { return stopping_; });
      if (stopping_) break;
      lock.unlock();
      Round("periodic");
      lock.lock();
    }
  }
  void Round(const char* which) {
    absl::StatusOr<launcher::SyncCounts> c = sync_->Upload();
    if (!c.ok()) {
      Logger()->warn("checkpoint upload ({}): {}", which, std::string(c.status().message()));
    } else if (c->files > 0) {
      Logger()->info("checkpoint upload ({}): {} files, {} bytes", which, c->files, c->bytes);
    }
  }

  launcher::CheckpointSync* sync_;
  absl::Duration interval_;
  std::function<bool()> urgent_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

int RunInstanceWrapper(InstanceWrapperOptions options) {
  auto logger = Logger();
  if (options.command.empty()) {
    logger->error("no command after --");
    return 2;
  }
  if (options.notice_file.empty()) {
    logger->error("notice_file = \"\": name the file the command reads a notice from");
    return 2;
  }

  // The checkpoint folder, restored before the command starts.
  std::unique_ptr<launcher::ObjectStore> store;
  std::unique_ptr<launcher::CheckpointSync> sync;
  if (!options.checkpoint_uri.empty()) {
    absl::StatusOr<launcher::S3Location> where =
        launcher::ParseS3Uri("checkpoint_uri", options.checkpoint_uri);
    if (!where.ok()) {
      logger->error("{}", std::string(where.status().message()));
      return 2;
    }
    if (options.checkpoint_dir.empty()) {
      logger->error(
          "checkpoint_dir = \"\": --checkpoint_uri needs the local folder to keep in sync "
          "(--checkpoint_dir or SPOTDNN_CHECKPOINT_DIR)");
      return 2;
    }
    absl::StatusOr<launcher::AwsCredentials> credentials = launcher::ResolveAwsCredentials();
    if (!credentials.ok()) {
      logger->error("checkpoint_uri = \"{}\": {}", options.checkpoint_uri,
                    std::string(credentials.status().message()));
      return 1;
    }
    launcher::S3Client::Options s3_options;
    s3_options.region = options.s3_region;
    s3_options.endpoint_url = options.s3_endpoint;
    s3_options.credentials = *credentials;
    // Instance-role credentials expire after hours: S3's refusal has them resolved again.
    absl::StatusOr<std::unique_ptr<launcher::ObjectStore>> bucket =
        launcher::MakeRefreshingS3ObjectStore(s3_options, where->bucket,
                                              [] { return launcher::ResolveAwsCredentials(); });
    if (!bucket.ok()) {
      logger->error("{}", std::string(bucket.status().message()));
      return 2;
    }
    store = std::move(*bucket);
    sync = std::make_unique<launcher::CheckpointSync>(store.get(), where->prefix,
                                                      options.checkpoint_dir);
    absl::StatusOr<launcher::SyncCounts> restored = sync->Restore();
    if (!restored.ok()) {
      logger->error("checkpoint restore from {} into {}: {}", options.checkpoint_uri,
                    options.checkpoint_dir, std::string(restored.status().message()));
      return 1;
    }
    logger->info(
        "checkpoint restore from {} into {}: {} files, {} bytes{}", options.checkpoint_uri,
        options.checkpoint_dir, restored->files, restored->bytes,
        restored->skipped > 0 ? absl::StrCat(" (", restored->skipped, " keys skipped)") : "");
  }

  // A notice file left from an earlier run would read as a notice now.
  if (::unlink(options.notice_file.c_str()) == 0) {
    logger->info("removed a stale notice file {}", options.notice_file);
  }

  std::unique_ptr<SampleSink> sink;
  if (!options.profiler.empty()) sink = MakeProfilerSink(options.profiler, options.report_deadline);
  absl::StatusOr<std::unique_ptr<SampleForwarder>> forwarder =
      SampleForwarder::Start(options.forwarder, std::move(sink));
  if (!forwarder.ok()) {
    logger->error("{}", std::string(forwarder.status().message()));
    return 2;
  }

  const std::string cloud(detector::CloudName(options.agent.cloud));
  NoticeDelivery notices(options.notice_file, options.notice_signal, cloud,
                         options.agent.instance_id);
  options.agent.on_notice = [&notices](const detector::Notice& n) { notices.OnNotice(n); };
  Agent agent(options.agent);
  if (absl::Status s = agent.Start(); !s.ok()) {
    logger->error("{}", std::string(s.message()));
    (*forwarder)->Close(absl::ZeroDuration());
    return 2;
  }

  SampleLineReader reader(options.sample_defaults);
  SampleForwarder* f = forwarder->get();
  auto on_line = [&reader, f, &logger](absl::string_view line) {
    const size_t reasons = reader.reasons().size();
    std::optional<v1::Sample> sample = reader.Read(line);
    if (reader.reasons().size() > reasons) {
      logger->warn("malformed sample line (not sent): {}", reader.reasons().back());
    }
    if (sample) f->Add(*std::move(sample));
  };
  WrappedCommandOptions command_options;
  command_options.argv = options.command;
  command_options.env.emplace_back("SPOTDNN_NOTICE_FILE", options.notice_file);
  if (!options.checkpoint_dir.empty()) {
    command_options.env.emplace_back("SPOTDNN_CHECKPOINT_DIR", options.checkpoint_dir);
  }
  command_options.orphan_grace = options.orphan_grace;
  absl::StatusOr<std::unique_ptr<WrappedCommand>> command =
      WrappedCommand::Start(command_options, on_line);
  if (!command.ok()) {
    logger->error("{}", std::string(command.status().message()));
    agent.Stop();
    (*forwarder)->Close(absl::ZeroDuration());
    return absl::IsNotFound(command.status()) ? 127 : 1;
  }
  logger->info("started the command (process group {}): {}", (*command)->process_group(),
               absl::StrJoin(options.command, " "));
  notices.SetCommand(command->get());
  std::unique_ptr<CheckpointUploader> uploader;
  if (sync) {
    uploader = std::make_unique<CheckpointUploader>(sync.get(), options.checkpoint_interval,
                                                    [&notices] { return notices.noticed(); });
  }

  // Until the command exits: SIGTERM and SIGINT go on to its process group.
  sigset_t shutdown;
  sigemptyset(&shutdown);
  sigaddset(&shutdown, SIGINT);
  sigaddset(&shutdown, SIGTERM);
  std::optional<ChildExit> exit;
  while (!(exit = (*command)->Wait(absl::Milliseconds(100)))) {
    timespec zero{0, 0};
    const int sig = sigtimedwait(&shutdown, nullptr, &zero);
    if (sig > 0) {
      logger->info("signal {} received; passing it to the command", sig);
      if (absl::Status s = (*command)->Signal(sig); !s.ok()) {
        logger->warn("{}", std::string(s.message()));
      }
    }
  }
  logger->info("the command ended: {}", exit->Describe());
  if (!(*command)->FinishOutput(absl::Seconds(2))) {
    logger->warn("processes the command started still hold its output; stopped reading it");
  }
  notices.SetCommand(nullptr);
  // A notice read just now (the command ended at its signal) still reaches the detector.
  if (!agent.Flush(options.flush_timeout)) {
    logger->warn("a revocation notice was not acknowledged by a detector within {} s",
                 absl::ToDoubleSeconds(options.flush_timeout));
  }
  agent.Stop();
  const auto flush_start = std::chrono::steady_clock::now();
  (*forwarder)->Close(options.flush_timeout);
  const double flush_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - flush_start).count();
  const SampleForwarderStats st = (*forwarder)->stats();
  logger->info(
      "samples: {} lines read, {} sample lines, {} malformed, {} queued, {} duplicates, {} "
      "acknowledged by the profiler ({} rejected by it), {} left in the spool; flush took {:.2f} s",
      reader.lines(), reader.sample_lines(), reader.malformed(), st.queued, st.duplicates,
      st.acknowledged, st.rejected, st.pending, flush_s);
  if (uploader) uploader->Finish();
  return exit->ShellStatus();
}

}  // namespace spotdnn::services
