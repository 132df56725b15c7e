// Child processes for tests that start the real binaries from the build folder.
#ifndef SPOTDNN_TESTS_TESTING_CHILD_PROCESS_H_
#define SPOTDNN_TESTS_TESTING_CHILD_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace spotdnn::testing {

// A child process started from argv (argv[0] a path), stopped with SIGTERM at the end. With
// `stderr_file`, its standard error goes there.
class Child {
 public:
  explicit Child(std::vector<std::string> argv, const std::string& stderr_file = "") {
    pid_ = fork();
    if (pid_ == 0) {
      if (!stderr_file.empty()) {
        const int fd = open(stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, STDERR_FILENO);
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

  // SIGTERM, then whether it exited normally with status 0.
  bool Stop() {
    if (pid_ <= 0) return false;
    kill(pid_, SIGTERM);
    return Wait() == 0;
  }
  // Waits for the child to exit by itself; its exit status, or -1 when it did not exit normally.
  int Wait() {
    if (pid_ <= 0) return -1;
    int status = 0;
    const bool exited = waitpid(pid_, &status, 0) == pid_ && WIFEXITED(status);
    pid_ = -1;
    return exited ? WEXITSTATUS(status) : -1;
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

 private:
  pid_t pid_ = -1;
};

// The port a server wrote to `file` (--port_file), waiting up to 10 s; 0 when none came.
inline int ReadPort(const std::string& file) {
  for (int i = 0; i < 500; ++i) {
    std::ifstream in(file);
    int port = 0;
    if (in >> port && port > 0) return port;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

}  // namespace spotdnn::testing

#endif  // SPOTDNN_TESTS_TESTING_CHILD_PROCESS_H_
