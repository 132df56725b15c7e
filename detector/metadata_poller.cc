#include "detector/metadata_poller.h"

#include <curl/curl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/backoff.h"
#include "detector/metadata_parsers.h"

namespace spotdnn::detector {
namespace {

// Times the poller schedules on: steady readings of its options' clock.
using TimePoint = std::chrono::steady_clock::time_point;
constexpr int64_t kGcePreemptNoticeMs = 30'000;

// What a request asks for.
enum class Channel {
  kAwsToken,
  kAwsAction,
  kAwsRebalance,
  kGcePreempted,
  kGceMaintenance,
  kAzureName,
  kAzureEvents,
  kAzureAck
};

const char* ChannelPath(Channel c) {
  switch (c) {
    case Channel::kAwsToken:
      return "/latest/api/token";
    case Channel::kAwsAction:
      return "/latest/meta-data/spot/instance-action";
    case Channel::kAwsRebalance:
      return "/latest/meta-data/events/recommendations/rebalance";
    case Channel::kGcePreempted:
      return "/computeMetadata/v1/instance/preempted";
    case Channel::kGceMaintenance:
      return "/computeMetadata/v1/instance/maintenance-event";
    case Channel::kAzureName:
      return "/metadata/instance/compute";
    case Channel::kAzureEvents:
    case Channel::kAzureAck:
      return "/metadata/scheduledevents";
  }
  return "";
}

std::once_flag curl_init_once;

}  // namespace

absl::Status ValidateEndpoint(std::string_view field, std::string_view endpoint) {
  const bool scheme = endpoint.rfind("http://", 0) == 0 || endpoint.rfind("https://", 0) == 0;
  const size_t host_start = endpoint.find("//") + 2;
  if (!scheme || endpoint.size() <= host_start || endpoint.find('?') != std::string_view::npos ||
      endpoint.find(' ') != std::string_view::npos || endpoint.size() > 2048) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(field), " = \"", std::string(endpoint.substr(0, 200)),
        "\": expected a base URL such as http://169.254.169.254 or http://127.0.0.1:8080/i/ID"));
  }
  return absl::OkStatus();
}

struct MetadataPoller::Impl {
  struct Target;
  // One HTTP request in flight.
  struct Request {
    std::shared_ptr<Target> target;
    Channel channel;
    CURL* easy = nullptr;
    curl_slist* headers = nullptr;
    std::string url;
    std::string body;
    std::string etag;
    std::string sent_etag;
    std::string post;
    bool too_long = false;
    char error[CURL_ERROR_SIZE] = {0};
  };
  struct Target {
    PollTarget t;
    bool removed = false;
    // Rounds (AWS, Azure).
    int inflight = 0;
    bool got_401 = false;
    bool retried_401 = false;
    std::vector<Notice> notices;
    TimePoint round_start;
    int failures = 0;
    std::map<Channel, std::string> errors;  // the current problem of each channel
    // AWS.
    std::string token;
    TimePoint token_refresh_at;
    // GCE: per channel (0 preempted, 1 maintenance).
    std::string etag[2];
    int gce_failures[2] = {0, 0};
    // Azure: this VM's name (IMDS compute.name), read once before the first scheduled events.
    std::string azure_vm_name;
    std::unordered_set<std::string> acked;
    bool ack_inflight = false;
  };
  // A scheduled start: a round, or one GCE channel's next poll.
  struct Due {
    TimePoint at;
    uint64_t order;
    std::shared_ptr<Target> target;
    int what;  // -1 round; 0/1 GCE channel
    bool operator>(const Due& o) const { return at != o.at ? at > o.at : order > o.order; }
  };

  MetadataPoller* owner;
  PollerOptions options;
  base::Clock* clock = nullptr;  // options.clock, or the real clock

  // The clock's steady reading as a time point.
  TimePoint Now() const {
    return TimePoint(std::chrono::duration_cast<TimePoint::duration>(
        absl::ToChronoNanoseconds(clock->SteadyNow())));
  }
  CURLM* multi = nullptr;
  int epoll_fd = -1;
  std::atomic<int> wake_fd{-1};
  int64_t curl_timeout_ms = -1;

  std::mutex mu;  // guards stop, ops and count
  bool stop = false;
  // With a clock other than the real one (a fake clock in tests), time moves when that clock says
  // so, not while epoll waits: a watcher thread blocks on the clock and wakes the loop each time
  // it moves, so that what falls due then starts at once.
  std::condition_variable watch_cv;  // notified (under mu) when stop is set
  std::thread watcher;
  std::vector<std::pair<bool, PollTarget>> ops;  // (add?, target), in call order
  size_t count = 0;

  // Owned by the polling thread.
  std::unordered_map<std::string, std::shared_ptr<Target>> targets;
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> heap;
  uint64_t order = 0;
  std::unordered_set<Request*> inflight;

  void Wake() {
    const uint64_t one = 1;
    if (wake_fd >= 0) (void)!write(wake_fd, &one, sizeof(one));
  }

  // The watcher's loop: wakes the polling thread whenever the clock's steady reading changes.
  void WatchClock() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      const absl::Duration seen = clock->SteadyNow();
      clock->WaitFor(lock, watch_cv, absl::Hours(24),
                     [&] { return stop || clock->SteadyNow() != seen; });
      if (!stop) Wake();
    }
  }

  static int SocketCallback(CURL*, curl_socket_t s, int what, void* userp, void*) {
    Impl* self = static_cast<Impl*>(userp);
    epoll_event ev{};
    ev.data.fd = s;
    if (what == CURL_POLL_REMOVE) {
      epoll_ctl(self->epoll_fd, EPOLL_CTL_DEL, s, nullptr);
      return 0;
    }
    ev.events = (what & CURL_POLL_IN ? uint32_t{EPOLLIN} : 0u) |
                (what & CURL_POLL_OUT ? uint32_t{EPOLLOUT} : 0u);
    if (epoll_ctl(self->epoll_fd, EPOLL_CTL_MOD, s, &ev) != 0) {
      epoll_ctl(self->epoll_fd, EPOLL_CTL_ADD, s, &ev);
    }
    return 0;
  }

  static int TimerCallback(CURLM*, long timeout_ms, void* userp) {
    static_cast<Impl*>(userp)->curl_timeout_ms = timeout_ms;
    return 0;
  }

  static size_t WriteCallback(char* data, size_t size, size_t n, void* userp) {
    Request* r = static_cast<Request*>(userp);
    if (r->body.size() + size * n > kMaxMetadataBody) {
      r->too_long = true;
      return 0;  // aborts the transfer
    }
    r->body.append(data, size * n);
    return size * n;
  }

  static size_t HeaderCallback(char* data, size_t size, size_t n, void* userp) {
    Request* r = static_cast<Request*>(userp);
    const std::string_view line(data, size * n);
    if (line.size() > 5 && absl::EqualsIgnoreCase(std::string(line.substr(0, 5)), "etag:")) {
      r->etag = std::string(absl::StripAsciiWhitespace(std::string(line.substr(5))));
    }
    return size * n;
  }

  absl::Status Init() {
    std::call_once(curl_init_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    multi = curl_multi_init();
    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (multi == nullptr || epoll_fd < 0 || wake_fd < 0) {
      return absl::InternalError("metadata poller: cannot set up libcurl multi and epoll");
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_fd;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &ev);
    curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, &Impl::SocketCallback);
    curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, &Impl::TimerCallback);
    curl_multi_setopt(multi, CURLMOPT_TIMERDATA, this);
    if (options.max_connections_per_host > 0) {
      curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS,
                        static_cast<long>(options.max_connections_per_host));
      curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS,
                        static_cast<long>(options.max_connections_per_host));
    }
    return absl::OkStatus();
  }

  // Abandons transfers in flight and closes every connection. Idempotent.
  void Close() {
    for (Request* r : inflight) Free(r);
    inflight.clear();
    if (multi) curl_multi_cleanup(multi);
    multi = nullptr;
    if (epoll_fd >= 0) close(epoll_fd);
    epoll_fd = -1;
    if (wake_fd >= 0) close(wake_fd);
    wake_fd = -1;
  }

  ~Impl() { Close(); }

  void Free(Request* r) {
    curl_multi_remove_handle(multi, r->easy);
    curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->headers);
    delete r;
  }

  void Schedule(const std::shared_ptr<Target>& t, TimePoint at, int what) {
    heap.push(Due{at, order++, t, what});
  }

  static std::chrono::milliseconds Ms(absl::Duration d) {
    return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
  }

  // The wait before a failed target's next poll: the shared policy (base/backoff.h) from a
  // quarter of the interval (at least 50 ms) up to max_backoff, without jitter (a schedule).
  std::chrono::milliseconds Backoff(int failures) const {
    const absl::Duration first = std::max(absl::Milliseconds(50), options.interval / 4);
    const base::BackoffPolicy policy({.max_attempts = 0,
                                      .initial = first,
                                      .max = std::max(first, options.max_backoff),
                                      .jitter = base::Jitter::kNone});
    return Ms(policy.Delay(failures));
  }

  void Issue(const std::shared_ptr<Target>& t, Channel channel, std::string query = "",
             int64_t timeout_ms = 0, std::string post = "") {
    auto* r = new Request;
    r->post = std::move(post);
    r->target = t;
    r->channel = channel;
    r->easy = curl_easy_init();
    r->url = absl::StrCat(t->t.endpoint, ChannelPath(channel), query);
    CURL* e = r->easy;
    curl_easy_setopt(e, CURLOPT_URL, r->url.c_str());
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");  // metadata never goes through a proxy
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(
        e, CURLOPT_TIMEOUT_MS,
        static_cast<long>(timeout_ms > 0 ? timeout_ms
                                         : absl::ToInt64Milliseconds(options.request_timeout)));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(absl::ToInt64Milliseconds(options.connect_timeout)));
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Impl::WriteCallback);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Impl::HeaderCallback);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->error);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    switch (channel) {
      case Channel::kAwsToken:
        r->headers = curl_slist_append(
            r->headers,
            absl::StrCat("X-aws-ec2-metadata-token-ttl-seconds: ", options.aws_token_ttl_s)
                .c_str());
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, 0L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
        break;
      case Channel::kAwsAction:
      case Channel::kAwsRebalance:
        r->headers = curl_slist_append(
            r->headers, absl::StrCat("X-aws-ec2-metadata-token: ", t->token).c_str());
        break;
      case Channel::kGcePreempted:
      case Channel::kGceMaintenance:
        r->headers = curl_slist_append(r->headers, "Metadata-Flavor: Google");
        r->sent_etag = t->etag[channel == Channel::kGcePreempted ? 0 : 1];
        break;
      case Channel::kAzureName:
      case Channel::kAzureEvents:
        r->headers = curl_slist_append(r->headers, "Metadata: true");
        break;
      case Channel::kAzureAck:
        r->headers = curl_slist_append(r->headers, "Metadata: true");
        r->headers = curl_slist_append(r->headers, "Content-Type: application/json");
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, static_cast<long>(r->post.size()));
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->post.c_str());
        break;
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    inflight.insert(r);
    curl_multi_add_handle(multi, e);
  }

  void IssueAzureAck(const std::shared_ptr<Target>& t, const std::vector<std::string>& ids) {
    t->ack_inflight = true;
    for (const std::string& id : ids) t->acked.insert(id);
    Issue(t, Channel::kAzureAck, "?api-version=2020-07-01", 0, AzureStartRequestsBody(ids));
  }

  void StartRound(const std::shared_ptr<Target>& t) {
    if (t->inflight == 0 && !t->retried_401) t->round_start = Now();
    switch (t->t.cloud) {
      case Cloud::kAws:
        if (t->token.empty() || Now() >= t->token_refresh_at) {
          t->inflight = 1;
          Issue(t, Channel::kAwsToken);
        } else {
          t->inflight = 2;
          Issue(t, Channel::kAwsAction);
          Issue(t, Channel::kAwsRebalance);
        }
        break;
      case Cloud::kAzure:
        t->inflight = 1;
        // Scheduled Events list the events of every VM in the availability set or placement
        // group; which are this VM's is known only from its name, so nothing is read (and no
        // notice reported) until the name is.
        if (t->azure_vm_name.empty()) {
          Issue(t, Channel::kAzureName, "?api-version=2021-02-01");
        } else {
          Issue(t, Channel::kAzureEvents, "?api-version=2020-07-01");
        }
        break;
      default:
        break;
    }
  }

  void StartGce(const std::shared_ptr<Target>& t, int which) {
    const Channel channel = which == 0 ? Channel::kGcePreempted : Channel::kGceMaintenance;
    if (options.gce_long_poll && !t->etag[which].empty()) {
      Issue(t, channel,
            absl::StrCat("?wait_for_change=true&last_etag=", t->etag[which],
                         "&timeout_sec=", options.gce_long_poll_timeout_s),
            int64_t{options.gce_long_poll_timeout_s} * 1000 +
                absl::ToInt64Milliseconds(options.request_timeout));
    } else {
      Issue(t, channel);
    }
  }

  // The problem with a finished transfer, or "" when it answered `status` (200 or 404).
  static std::string Problem(Request* r, CURLcode code, long status) {
    const std::string what = ChannelPath(r->channel);
    if (r->too_long) {
      return absl::StrCat(what, ": answer longer than ", kMaxMetadataBody, " bytes");
    }
    if (code != CURLE_OK) {
      return absl::StrCat(what, ": ", r->error[0] ? r->error : curl_easy_strerror(code));
    }
    if (status != 200 && status != 404) return absl::StrCat(what, ": HTTP ", status);
    return "";
  }

  void Emit(const std::shared_ptr<Target>& t, std::vector<Notice> notices) {
    PollResult result;
    result.instance_id = t->t.instance_id;
    result.healthy = t->errors.empty();
    std::vector<std::string> reasons;
    for (const auto& [channel, reason] : t->errors) reasons.push_back(reason);
    result.reason = absl::StrJoin(reasons, "; ");
    result.notices = std::move(notices);
    result.observed_unix_ms = clock->NowUnixMs();
    result.tag = t->t.tag;
    owner->sink_(result);
  }

  void FinishRound(const std::shared_ptr<Target>& t) {
    if (t->got_401) {
      t->got_401 = false;
      t->token.clear();
      if (!t->retried_401) {  // the token went stale: fetch a fresh one and ask again at once
        t->retried_401 = true;
        StartRound(t);
        return;
      }
      t->errors[Channel::kAwsToken] = "401 Unauthorized even with a fresh IMDSv2 token";
    }
    t->retried_401 = false;
    Emit(t, std::move(t->notices));
    t->notices.clear();
    if (t->errors.empty()) {
      t->failures = 0;
      Schedule(t, t->round_start + Ms(options.interval), -1);
    } else {
      ++t->failures;
      Schedule(t, Now() + Backoff(t->failures), -1);
    }
  }

  void OnDone(Request* r, CURLcode code) {
    owner->requests_completed_.fetch_add(1, std::memory_order_relaxed);
    std::shared_ptr<Target> t = r->target;
    long status = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    inflight.erase(r);
    std::unique_ptr<Request, std::function<void(Request*)>> owned(r,
                                                                  [this](Request* q) { Free(q); });
    if (t->removed) return;
    const std::string problem = Problem(r, code, status);
    const Channel ch = r->channel;
    switch (ch) {
      case Channel::kAwsToken: {
        if (problem.empty() && status == 200) {
          auto token = ParseAwsToken(r->body);
          if (token.ok()) {
            t->token = *token;
            const int64_t margin =
                std::min<int64_t>(absl::ToInt64Milliseconds(options.aws_token_refresh_margin),
                                  int64_t{options.aws_token_ttl_s} * 500);
            t->token_refresh_at =
                Now() + std::chrono::milliseconds(int64_t{options.aws_token_ttl_s} * 1000 - margin);
            t->errors.erase(Channel::kAwsToken);
            t->inflight = 2;
            Issue(t, Channel::kAwsAction);
            Issue(t, Channel::kAwsRebalance);
            return;
          }
          t->errors[ch] = std::string(token.status().message());
        } else {
          t->errors[ch] =
              problem.empty() ? absl::StrCat(ChannelPath(ch), ": HTTP ", status) : problem;
        }
        t->inflight = 0;
        FinishRound(t);
        return;
      }
      case Channel::kAwsAction:
      case Channel::kAwsRebalance: {
        if (problem.empty() && status == 200) {
          auto notice = ch == Channel::kAwsAction ? ParseAwsInstanceAction(r->body)
                                                  : ParseAwsRebalance(r->body);
          if (notice.ok()) {
            t->notices.push_back(*std::move(notice));
            t->errors.erase(ch);
          } else {
            t->errors[ch] = std::string(notice.status().message());
          }
        } else if (problem.empty()) {  // 404: no notice
          t->errors.erase(ch);
        } else if (code == CURLE_OK && status == 401) {
          t->got_401 = true;
          t->errors[ch] = absl::StrCat(ChannelPath(ch), ": HTTP 401");
        } else {
          t->errors[ch] = problem;
        }
        if (--t->inflight == 0) FinishRound(t);
        return;
      }
      case Channel::kAzureName: {
        if (problem.empty() && status == 200) {
          auto name = ParseAzureComputeName(r->body);
          if (name.ok()) {
            t->azure_vm_name = *std::move(name);
            t->errors.erase(ch);
            Issue(t, Channel::kAzureEvents, "?api-version=2020-07-01");
            return;
          }
          t->errors[ch] = std::string(name.status().message());
        } else {
          t->errors[ch] =
              problem.empty() ? absl::StrCat(ChannelPath(ch), ": HTTP ", status) : problem;
        }
        absl::StrAppend(&t->errors[ch], " (this VM's name is unknown: no scheduled event is read)");
        t->inflight = 0;
        FinishRound(t);
        return;
      }
      case Channel::kAzureEvents: {
        std::vector<std::string> to_ack;
        if (problem.empty() && status == 200) {
          auto document = ParseAzureScheduledEvents(r->body);
          if (document.ok()) {
            // A malformed event makes the round unhealthy, with why; the well-formed events
            // beside it (a Preempt among them) are still reported.
            if (document->malformed.empty()) {
              t->errors.erase(ch);
            } else {
              t->errors[ch] = absl::StrJoin(document->malformed, "; ");
            }
            // Only the events whose Resources name this VM: the others are its neighbours'.
            t->notices = AzureNotices(*document, t->azure_vm_name);
            for (std::string& id : AzurePreemptsToAcknowledge(*document, t->azure_vm_name)) {
              if (!t->acked.count(id)) to_ack.push_back(std::move(id));
            }
          } else {
            t->errors[ch] = std::string(document.status().message());
          }
        } else {
          t->errors[ch] =
              problem.empty() ? absl::StrCat(ChannelPath(ch), ": HTTP ", status) : problem;
        }
        t->inflight = 0;
        FinishRound(t);  // reports the notices before any acknowledgement goes out
        if (options.azure_ack && !to_ack.empty() && !t->ack_inflight) IssueAzureAck(t, to_ack);
        return;
      }
      case Channel::kAzureAck: {
        t->ack_inflight = false;
        if (!problem.empty() || status != 200) {
          // Not acknowledged: forget the ids so that the next round tries again.
          auto ids = ParseAzureStartRequests(r->post);
          if (ids.ok()) {
            for (const std::string& id : *ids) t->acked.erase(id);
          }
        }
        return;
      }
      case Channel::kGcePreempted:
      case Channel::kGceMaintenance: {
        const int which = ch == Channel::kGcePreempted ? 0 : 1;
        std::vector<Notice> notices;
        bool ok = false;
        if (problem.empty() && status == 200) {
          if (which == 0) {
            auto preempted = ParseGcePreempted(r->body);
            if (preempted.ok()) {
              ok = true;
              if (*preempted) {
                Notice n;
                n.kind = EventKind::kNotice;
                n.action = "preempt";
                n.effective_unix_ms = clock->NowUnixMs() + kGcePreemptNoticeMs;
                n.key = "gce:preempted";
                n.detail = "instance/preempted = TRUE";
                notices.push_back(std::move(n));
              }
            } else {
              t->errors[ch] = std::string(preempted.status().message());
            }
          } else {
            auto event = ParseGceMaintenanceEvent(r->body);
            if (event.ok()) {
              ok = true;
              if (*event != "NONE") {
                Notice n;
                n.kind = *event == "TERMINATE_ON_HOST_MAINTENANCE" ? EventKind::kNotice
                                                                   : EventKind::kMaintenance;
                n.action = *event;
                n.key = absl::StrCat("gce:maintenance-event:", *event, ":", r->etag);
                n.detail = absl::StrCat("instance/maintenance-event = ", *event);
                notices.push_back(std::move(n));
              }
            } else {
              t->errors[ch] = std::string(event.status().message());
            }
          }
        } else {
          t->errors[ch] =
              problem.empty() ? absl::StrCat(ChannelPath(ch), ": HTTP ", status) : problem;
        }
        if (ok) {
          t->errors.erase(ch);
          t->gce_failures[which] = 0;
          const bool unchanged = !r->etag.empty() && r->etag == r->sent_etag;
          // How long the server took is real time whatever the clock (libcurl's own measure).
          curl_off_t took_us = 0;
          curl_easy_getinfo(r->easy, CURLINFO_TOTAL_TIME_T, &took_us);
          const bool quick = took_us < 20'000;
          t->etag[which] = r->etag;
          Emit(t, std::move(notices));
          // Long polls go straight back out; a server that answers an unchanged value at once
          // (no long-poll support) is polled at the interval instead of in a busy loop.
          Schedule(t,
                   options.gce_long_poll && !(unchanged && quick) && !r->etag.empty()
                       ? Now()
                       : Now() + Ms(options.interval),
                   which);
        } else {
          Emit(t, {});
          Schedule(t, Now() + Backoff(++t->gce_failures[which]), which);
        }
        return;
      }
    }
  }

  void ApplyControl() {
    std::vector<std::pair<bool, PollTarget>> pending;
    {
      std::lock_guard<std::mutex> lock(mu);
      pending.swap(ops);
    }
    for (auto& [add, p] : pending) {
      if (!add) {
        auto it = targets.find(p.instance_id);
        if (it == targets.end()) continue;
        it->second->removed = true;
        targets.erase(it);
        continue;
      }
      if (auto it = targets.find(p.instance_id); it != targets.end()) it->second->removed = true;
      auto t = std::make_shared<Target>();
      t->t = std::move(p);
      targets[t->t.instance_id] = t;
      // First rounds are spread over one interval (by a hash of the id), so that thousands of
      // targets added at once do not all ask in the same instant and queue into timeouts.
      const auto first =
          Now() + std::chrono::milliseconds(std::hash<std::string>()(t->t.instance_id) %
                                            static_cast<uint64_t>(std::max<int64_t>(
                                                1, absl::ToInt64Milliseconds(options.interval))));
      if (t->t.cloud == Cloud::kGce) {
        Schedule(t, first, 0);
        Schedule(t, first, 1);
      } else {
        Schedule(t, first, -1);
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    count = targets.size();
  }

  void Drain() {
    int pending = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &pending)) {
      if (msg->msg != CURLMSG_DONE) continue;
      Request* r = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &r);
      const CURLcode code = msg->data.result;
      if (r != nullptr) OnDone(r, code);
    }
  }

  void Run() {
    std::vector<epoll_event> events(256);
    int running = 0;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stop) break;
      }
      ApplyControl();
      const auto now = Now();
      while (!heap.empty() && heap.top().at <= now) {
        Due due = heap.top();
        heap.pop();
        if (due.target->removed) continue;
        if (due.what < 0) {
          StartRound(due.target);
        } else {
          StartGce(due.target, due.what);
        }
      }
      // Kick newly added transfers.
      curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running);
      Drain();
      int64_t wait_ms = 1000;
      if (!heap.empty()) {
        wait_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(heap.top().at - Now()).count();
        wait_ms = std::clamp<int64_t>(wait_ms + 1, 0, 1000);
      }
      if (curl_timeout_ms >= 0) wait_ms = std::min(wait_ms, curl_timeout_ms);
      const int n = epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()),
                               static_cast<int>(wait_ms));
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == wake_fd) {
          uint64_t value;
          while (read(wake_fd, &value, sizeof(value)) > 0) {
          }
          continue;
        }
        int flags = 0;
        if (events[i].events & EPOLLIN) flags |= CURL_CSELECT_IN;
        if (events[i].events & EPOLLOUT) flags |= CURL_CSELECT_OUT;
        if (events[i].events & (EPOLLERR | EPOLLHUP)) flags |= CURL_CSELECT_ERR;
        curl_multi_socket_action(multi, fd, flags, &running);
      }
      Drain();
    }
  }
};

MetadataPoller::MetadataPoller(PollerOptions options, Sink sink)
    : options_(std::move(options)), sink_(std::move(sink)), impl_(std::make_unique<Impl>()) {
  impl_->owner = this;
  impl_->options = options_;
  impl_->clock = options_.clock != nullptr ? options_.clock : &base::RealClock::Get();
}

MetadataPoller::~MetadataPoller() { Stop(); }

absl::Status MetadataPoller::Start() {
  if (thread_.joinable()) return absl::OkStatus();
  if (auto s = impl_->Init(); !s.ok()) return s;
  thread_ = std::thread([this] { impl_->Run(); });
  if (dynamic_cast<base::RealClock*>(impl_->clock) == nullptr) {
    impl_->watcher = std::thread([this] { impl_->WatchClock(); });
  }
  return absl::OkStatus();
}

void MetadataPoller::Stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
    impl_->watch_cv.notify_all();
  }
  impl_->Wake();
  if (impl_->watcher.joinable()) impl_->watcher.join();
  if (thread_.joinable()) thread_.join();
  impl_->Close();
}

absl::Status MetadataPoller::Add(const PollTarget& target) {
  if (target.instance_id.empty()) {
    return absl::InvalidArgumentError("instance_id = \"\": must not be empty");
  }
  if (target.cloud == Cloud::kUnspecified) {
    return absl::InvalidArgumentError(absl::StrCat("cloud of instance \"", target.instance_id,
                                                   "\" = unspecified: expected aws, gce or azure"));
  }
  if (auto s = ValidateEndpoint("metadata_endpoint", target.endpoint); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->ops.emplace_back(true, target);
  }
  impl_->Wake();
  return absl::OkStatus();
}

void MetadataPoller::Remove(const std::string& instance_id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->ops.emplace_back(false, PollTarget{instance_id, Cloud::kUnspecified, ""});
  }
  impl_->Wake();
}

size_t MetadataPoller::size() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->count;
}

}  // namespace spotdnn::detector
