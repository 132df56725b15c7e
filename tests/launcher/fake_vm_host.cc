#include "tests/launcher/fake_vm_host.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "provisioner/launcher/sigv4.h"

extern char** environ;

namespace spotdnn::launcher::testing {
namespace {

// Waits up to `grace` for `pid` to exit after SIGTERM to its group, then SIGKILLs the group.
void Reap(pid_t pid, absl::Duration grace) {
  const absl::Time deadline = absl::Now() + grace;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) != 0) {
      kill(-pid, SIGKILL);  // what the script left behind in its group (the agent)
      return;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(-pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

}  // namespace

FakeVmHost::~FakeVmHost() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, pid] : running_) {
      kill(-pid, SIGTERM);
      threads_.emplace_back([pid = pid] { Reap(pid, absl::Seconds(2)); });
    }
    running_.clear();
  }
  // A pending preemption may stop a VM (and so start a reaper) while these are joined.
  for (;;) {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    if (threads.empty()) return;
    for (std::thread& t : threads) t.join();
  }
}

void FakeVmHost::Enable(BootOptions options) {
  std::lock_guard<std::mutex> lock(mu_);
  options_ = std::move(options);
  enabled_ = true;
}

bool FakeVmHost::enabled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return enabled_;
}

bool FakeVmHost::Boot(const std::string& name, const std::string& script) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return true;
  const std::string log_dir = absl::StrCat(options_.log_dir, "/", name);
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [key, value] : options_.env) env[key] = value;
  env["SPOTDNN_LOG_DIR"] = log_dir;
  if (options_.metadata_url) env["SPOTDNN_CLOUD_METADATA_URL"] = options_.metadata_url(name);
  if (!options_.bin_dir.empty()) env["PATH"] = options_.bin_dir + ":" + env["PATH"];
  std::vector<std::string> env_strings;
  for (const auto& [key, value] : env) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string bash = "/bin/bash";
  std::string dash_c = "-c";
  std::string body = script;
  char* argv[] = {bash.data(), dash_c.data(), body.data(), nullptr};

  const std::string console = log_dir + "/console.log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, console.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, bash.c_str(), &actions, &attr, argv, envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return false;
  running_[name] = pid;
  booted_.push_back(name);
  return true;
}

void FakeVmHost::Stop(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = running_.find(name);
  if (it == running_.end()) return;
  const pid_t pid = it->second;
  running_.erase(it);
  kill(-pid, SIGTERM);
  threads_.emplace_back([pid] { Reap(pid, absl::Seconds(2)); });
}

void FakeVmHost::Preempt(const std::string& name, absl::Duration notice,
                         std::function<void()> then) {
  std::function<void(const std::string&, absl::Time)> publish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    publish = options_.publish_notice;
  }
  const absl::Time effective = absl::Now() + notice;
  if (publish) publish(name, effective);
  std::lock_guard<std::mutex> lock(mu_);
  threads_.emplace_back([effective, then = std::move(then)] {
    absl::SleepFor(effective - absl::Now());
    then();
  });
}

std::vector<std::string> FakeVmHost::booted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return booted_;
}

std::string FakeTokens::Issue(const std::string& prefix, absl::Duration lifetime) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string token =
      absl::StrFormat("%s%08x%08x", prefix, ++issued_, static_cast<unsigned>(std::rand()));
  tokens_[token] = absl::Now() + lifetime;
  return token;
}

bool FakeTokens::Valid(const std::string& authorization) const {
  absl::string_view view = authorization;
  if (!absl::ConsumePrefix(&view, "Bearer ")) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tokens_.find(std::string(view));
  return it != tokens_.end() && absl::Now() < it->second;
}

void FakeTokens::ExpireAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [token, expiry] : tokens_) expiry = absl::InfinitePast();
}

int FakeTokens::issued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return issued_;
}

std::map<std::string, std::string> ParseFormBody(const std::string& body) {
  std::map<std::string, std::string> out;
  for (absl::string_view part : absl::StrSplit(body, '&', absl::SkipEmpty())) {
    const size_t eq = part.find('=');
    std::string key(part.substr(0, eq));
    std::string value(eq == absl::string_view::npos ? "" : part.substr(eq + 1));
    for (char& c : key) c = c == '+' ? ' ' : c;
    for (char& c : value) c = c == '+' ? ' ' : c;
    out[UriDecode(key)] = UriDecode(value);
  }
  return out;
}

}  // namespace spotdnn::launcher::testing
