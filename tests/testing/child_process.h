// Child processes for tests that start the real binaries: started with execv (stdout and stderr
// optionally to a file), stopped with SIGTERM, killed with SIGKILL if still running at the end.
#ifndef SPOTDNN_TESTS_TESTING_CHILD_PROCESS_H_
#define SPOTDNN_TESTS_TESTING_CHILD_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace spotdnn::testing_util {

class Child {
 public:
  explicit Child(std::vector<std::string> argv, const std::string& output_file = "") {
    pid_ = fork();
    if (pid_ == 0) {
      if (!output_file.empty()) {
        int fd = open(output_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
          dup2(fd, 1);
          dup2(fd, 2);
        }
      }
      std::vector<char*> args;
      for (std::string& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }

  // SIGTERM, then whether it exited normally with status 0.
  bool Stop() {
    if (pid_ <= 0) return false;
    kill(pid_, SIGTERM);
    int status = 0;
    const bool ok =
        waitpid(pid_, &status, 0) == pid_ && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    pid_ = -1;
    return ok;
  }

  // Waits for it to exit by itself: its exit status, or -1 when it did not exit normally.
  int Wait() {
    if (pid_ <= 0) return -1;
    int status = 0;
    const bool exited = waitpid(pid_, &status, 0) == pid_ && WIFEXITED(status);
    pid_ = -1;
    return exited ? WEXITSTATUS(status) : -1;
  }

  // SIGKILL, as a crash would.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  // Its exit status once it exits within `timeout` (-1 when killed by a signal); nullopt when it
  // is still running then.
  std::optional<int> Wait(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return std::nullopt;
  }

  ~Child() { Kill(); }

 private:
  pid_t pid_ = -1;
};

// The port a server wrote to `file` (--port_file), waiting up to `patience`; 0 when none came.
// The default is generous: a sanitized binary opening its store on a busy 2-core CI machine can
// take well over ten seconds to serve.
inline int ReadPort(const std::string& file,
                    std::chrono::milliseconds patience = std::chrono::seconds(45)) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (true) {
    std::ifstream in(file);
    int port = 0;
    if (in >> port && port > 0) return port;
    if (std::chrono::steady_clock::now() > deadline) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The whole of a (log) file, or "" when it cannot be read: for failure messages.
inline std::string FileText(const std::string& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace spotdnn::testing_util

#endif  // SPOTDNN_TESTS_TESTING_CHILD_PROCESS_H_
