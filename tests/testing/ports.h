// Free loopback ports for tests that must know a port before a server binds it (a server
// restarted on the same address, an address where nothing listens).
#ifndef SPOTDNN_TESTS_TESTING_PORTS_H_
#define SPOTDNN_TESTS_TESTING_PORTS_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace spotdnn::testing_util {

// A port on 127.0.0.1 that was free a moment ago (the kernel's pick for port 0); 0 on failure.
inline int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace spotdnn::testing_util

#endif  // SPOTDNN_TESTS_TESTING_PORTS_H_
