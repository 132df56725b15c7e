#include "services/common/metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace spotdnn::services {
namespace {

using SteadyClock = std::chrono::steady_clock;

// One client connection: its request read, then its answer written, within one deadline.
struct Connection {
  int fd = -1;
  SteadyClock::time_point deadline;
  std::string in;      // the request read so far
  std::string out;     // the answer, once the request is complete
  size_t written = 0;  // of `out`
  bool answering = false;
};

std::string Answer(int code, absl::string_view reason, absl::string_view content_type,
                   absl::string_view body, bool head, absl::string_view extra_header = "") {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\n", extra_header,
                      "Connection: close\r\n\r\n", head ? "" : body);
}

}  // namespace

std::string MetricsServer::Respond(absl::string_view request, const metrics::Registry& registry) {
  // The request line: METHOD SP TARGET SP VERSION.
  const absl::string_view line = request.substr(0, request.find_first_of("\r\n"));
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    return Answer(400, "Bad Request", "text/plain; charset=utf-8", "bad request line\n", false);
  }
  const bool head = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head) {
    return Answer(405, "Method Not Allowed", "text/plain; charset=utf-8", "only GET\n", false,
                  "Allow: GET, HEAD\r\n");
  }
  absl::string_view path = parts[1];
  path = path.substr(0, path.find('?'));
  if (path != "/metrics") {
    return Answer(404, "Not Found", "text/plain; charset=utf-8", "not found: try /metrics\n", head);
  }
  return Answer(200, "OK", "text/plain; version=0.0.4; charset=utf-8", registry.Render(), head);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view field, absl::string_view value) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(field, " = \"", value, "\": ", why,
                                                   " (expected HOST:PORT, e.g. 0.0.0.0:9090)"));
  };
  const size_t colon = value.rfind(':');
  if (colon == absl::string_view::npos) return bad("no port");
  HostPort out;
  absl::string_view host = value.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) return bad("no host");
  out.host = std::string(host);
  if (!absl::SimpleAtoi(value.substr(colon + 1), &out.port) || out.port < 0 || out.port > 65535) {
    return bad("the port must be a number from 0 to 65535");
  }
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    absl::string_view field, absl::string_view listen, const metrics::Registry& registry,
    MetricsServerOptions options) {
  absl::StatusOr<HostPort> address = ParseHostPort(field, listen);
  if (!address.ok()) return address.status();
  const auto unavailable = [&](absl::string_view why) {
    return absl::UnavailableError(
        absl::StrCat(field, " = \"", listen, "\": cannot listen there (", why, ")"));
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(address->port);
  if (getaddrinfo(address->host.c_str(), port_text.c_str(), &hints, &found) != 0) {
    return unavailable("address invalid");
  }
  int fd = -1;
  int error = 0;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR only (a restart may rebind at once); not SO_REUSEPORT, with which a second
    // process given the same address would share it silently instead of failing.
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      error = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return unavailable(error != 0 ? std::strerror(error) : "address invalid");
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  const int port = bound.ss_family == AF_INET6
                       ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                       : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot make a pipe: ", std::strerror(errno)));
  }
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->host_ = address->host;
  server->port_ = port;
  server->listen_fd_ = fd;
  server->wake_read_ = wake[0];
  server->wake_write_ = wake[1];
  server->options_ = options;
  server->thread_ = std::thread([raw = server.get(), &registry] { raw->Serve(registry); });
  return server;
}

MetricsServer::~MetricsServer() {
  if (wake_write_ >= 0) {
    const char stop = 1;
    (void)!write(wake_write_, &stop, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, wake_read_, wake_write_}) {
    if (fd >= 0) close(fd);
  }
}

void MetricsServer::Serve(const metrics::Registry& registry) {
  std::list<Connection> connections;
  std::vector<pollfd> fds;
  std::vector<Connection*> polled;
  while (true) {
    const auto now = SteadyClock::now();
    // Past its deadline a connection is closed, whatever it was doing: a client sending a header
    // line a second, or reading its answer a byte at a time, holds nothing for long.
    for (auto it = connections.begin(); it != connections.end();) {
      if (now >= it->deadline) {
        close(it->fd);
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
    fds.clear();
    polled.clear();
    fds.push_back({wake_read_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    auto wait = std::chrono::milliseconds(1000);
    for (Connection& c : connections) {
      fds.push_back({c.fd, static_cast<short>(c.answering ? POLLOUT : POLLIN), 0});
      polled.push_back(&c);
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(
                                c.deadline - now + std::chrono::milliseconds(1)));
    }
    if (poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait.count(), 0))) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents != 0) break;  // Stop
    std::vector<Connection*> finished;
    for (size_t i = 0; i < polled.size(); ++i) {
      Connection& c = *polled[i];
      const short revents = fds[i + 2].revents;
      if (revents == 0) continue;
      if (!c.answering) {
        char buffer[4096];
        const ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          finished.push_back(&c);
          continue;
        }
        if (n > 0) c.in.append(buffer, static_cast<size_t>(n));
        const bool complete =
            c.in.find("\r\n\r\n") != std::string::npos || c.in.find("\n\n") != std::string::npos;
        if (complete) {
          c.out = Respond(c.in, registry);
          c.answering = true;
        } else if (c.in.size() > options_.max_request_bytes) {
          c.out = Answer(431, "Request Header Fields Too Large", "text/plain; charset=utf-8",
                         "request too large\n", false);
          c.answering = true;
        }
        if (!c.answering) continue;
      }
      const ssize_t n =
          send(c.fd, c.out.data() + c.written, c.out.size() - c.written, MSG_NOSIGNAL);
      if (n > 0) c.written += static_cast<size_t>(n);
      if ((n < 0 && errno != EAGAIN && errno != EINTR) || c.written == c.out.size()) {
        finished.push_back(&c);
      }
    }
    for (Connection* done : finished) {
      close(done->fd);
      connections.remove_if([done](const Connection& c) { return &c == done; });
    }
    // Newcomers last (the pointers in `polled` are used above). When all places are taken, the
    // oldest connection still sending its request makes room: a scrape sends its request at once,
    // so only slow (or idle) clients are pushed out, and a scrape is always answered.
    if (fds[1].revents & POLLIN) {
      while (true) {
        const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (client < 0) break;
        if (connections.size() >= static_cast<size_t>(options_.max_connections)) {
          auto oldest = connections.end();
          for (auto it = connections.begin(); it != connections.end(); ++it) {
            if (!it->answering &&
                (oldest == connections.end() || it->deadline < oldest->deadline)) {
              oldest = it;
            }
          }
          if (oldest == connections.end()) {
            close(client);  // every place is writing an answer: the newcomer waits for none
            continue;
          }
          close(oldest->fd);
          connections.erase(oldest);
        }
        connections.push_back({client, SteadyClock::now() + options_.connection_deadline});
      }
    }
  }
  for (Connection& c : connections) close(c.fd);
}

}  // namespace spotdnn::services
