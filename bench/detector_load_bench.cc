// Load bench of the revocation detector: one detector (the core with its curl-multi poller and
// SQLite store, in this process) watches N instances served by spotdnn-metadata-emulator (a
// separate process on 127.0.0.1), every instance gets a notice at a random time, and a
// subscriber reads the event log. Reports notice-to-event latency (from the moment the emulator
// starts showing the notice to the moment the subscriber has the event), late, lost and
// duplicated events, and this process's CPU use over the window (detector + subscriber; the
// emulator's CPU is not counted).
//
// A notice is on time when its event arrives before the window's end plus one poll interval and
// 2 s; late when it arrives after that, while the bench reads on for up to --drain_s more seconds
// (or until every notice has arrived); lost when it never arrives. On a starved host a detector
// may be late; a lost notice is a bug. With replicas, lost notices are told apart: never written
// to the event log (a second, independent replay of the log says), or written but missing from
// the subscriber's stream; and the lost instances' states and owners are listed.
//
// With --replicas N (N > 1) or a PostgreSQL --store, the detectors are N spotdnn-detector
// processes sharing one PostgreSQL database (a throwaway server the bench starts itself, like the
// tests, when --store is just "postgres"): instances are registered through the first replica,
// the subscriber streams from the last one, and --kill_replica_at_s kills the first one with
// SIGKILL that many seconds into the window. CPU is then the replicas' together.
//
// Usage: detector_load_bench [--instances 1000] [--interval_ms 1000] [--window_s 30]
//          [--cloud aws|azure|gce|mixed] [--notice_fraction 1.0] [--connections 128]
//          [--emulator_threads 300] [--seed 1] [--emulator PATH]
//          [--replicas 1] [--store sqlite|postgres|postgres://USER@HOST/DB]
//          [--kill_replica_at_s 0] [--lease_ms 1000] [--detector PATH] [--drain_s 120]
//          [--logs_dir DIR]
#include <curl/curl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "detector/detector.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "provisioner/launcher/http.h"
#include "spotdnn/v1/detector.grpc.pb.h"
#include "tests/testing/child_process.h"
#include "tests/testing/postgres_server.h"

namespace d = ::spotdnn::detector;
namespace pb = ::spotdnn::v1;

namespace {

struct Flags {
  int instances = 1000;
  int interval_ms = 1000;
  int window_s = 30;
  std::string cloud = "aws";
  double notice_fraction = 1.0;
  int connections = 128;
  int emulator_threads = 300;
  unsigned seed = 1;
  std::string emulator = SPOTDNN_BINARY_DIR "/spotdnn-metadata-emulator";
  int replicas = 1;
  std::string store = "sqlite";
  double kill_replica_at_s = 0;
  int lease_ms = 1000;
  std::string detector = SPOTDNN_BINARY_DIR "/spotdnn-detector";
  int drain_s = 120;     // how long after the window late events are waited for
  std::string logs_dir;  // where the replicas' logs are kept ("": a temporary folder, removed)
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--instances")
      f.instances = std::stoi(v);
    else if (k == "--interval_ms")
      f.interval_ms = std::stoi(v);
    else if (k == "--window_s")
      f.window_s = std::stoi(v);
    else if (k == "--cloud")
      f.cloud = v;
    else if (k == "--notice_fraction")
      f.notice_fraction = std::stod(v);
    else if (k == "--connections")
      f.connections = std::stoi(v);
    else if (k == "--emulator_threads")
      f.emulator_threads = std::stoi(v);
    else if (k == "--seed")
      f.seed = static_cast<unsigned>(std::stoul(v));
    else if (k == "--emulator")
      f.emulator = v;
    else if (k == "--replicas")
      f.replicas = std::stoi(v);
    else if (k == "--store")
      f.store = v;
    else if (k == "--kill_replica_at_s")
      f.kill_replica_at_s = std::stod(v);
    else if (k == "--lease_ms")
      f.lease_ms = std::stoi(v);
    else if (k == "--detector")
      f.detector = v;
    else if (k == "--drain_s")
      f.drain_s = std::stoi(v);
    else if (k == "--logs_dir")
      f.logs_dir = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  return f;
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

// CPU seconds a child process used so far (utime + stime from /proc).
double ChildCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; fields >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) {
      stime = std::stod(field);
      break;
    }
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// What the subscriber saw: each instance's notice events and when the first arrived.
struct Arrivals {
  std::map<std::string, int> notices;       // notice events per instance
  std::map<std::string, int64_t> first_ms;  // when its first notice event arrived
  std::vector<double> latency_ms;           // first event's arrival minus the notice's visibility
  // Its two parts: visible until a poll read it (the event's notice time), and read until the
  // subscriber had the event (the write, the log's read-back, the stream).
  std::vector<double> read_ms, delivered_ms;
  int other_events = 0;

  void Add(const std::string& instance_id, bool notice, int64_t notice_unix_ms,
           const std::map<std::string, int64_t>& visible_at, int64_t now) {
    if (!notice) {
      ++other_events;
      return;
    }
    if (++notices[instance_id] > 1) return;
    first_ms[instance_id] = now;
    auto it = visible_at.find(instance_id);
    if (it == visible_at.end()) return;
    latency_ms.push_back(static_cast<double>(now - it->second));
    read_ms.push_back(static_cast<double>(notice_unix_ms - it->second));
    delivered_ms.push_back(static_cast<double>(now - notice_unix_ms));
  }
  // How many of the scheduled notices have arrived.
  size_t Arrived(const std::map<std::string, int64_t>& visible_at) const {
    size_t n = 0;
    for (const auto& [id, at] : visible_at) n += first_ms.count(id);
    return n;
  }
};

// Prints the summary lines every mode prints. Events arriving after `on_time_by_ms` are late;
// a scheduled notice with no event at all is lost.
void PrintSummary(const std::map<std::string, int64_t>& visible_at, const Arrivals& a,
                  int64_t on_time_by_ms, double waited_s, double cpu, double wall) {
  int lost = 0, late = 0, duplicated = 0, unexpected = 0;
  for (const auto& [id, at] : visible_at) {
    auto it = a.first_ms.find(id);
    if (it == a.first_ms.end()) {
      ++lost;
    } else if (it->second > on_time_by_ms) {
      ++late;
    }
  }
  for (const auto& [id, n] : a.notices) {
    if (n > 1) duplicated += n - 1;
    if (!visible_at.count(id)) unexpected += n;
  }
  std::printf(
      "notices scheduled %zu, events %zu (on time %zu, late %d), lost %d, duplicated %d, "
      "unexpected %d, other events %d\n",
      visible_at.size(), a.latency_ms.size(), a.latency_ms.size() - late, late, lost, duplicated,
      unexpected, a.other_events);
  std::printf(
      "  on time: by the window's end + interval + 2 s; late: after that, within the %.0f s the "
      "bench read on; lost: no event by then\n",
      waited_s);
  std::printf("notice-to-event latency ms: p50 %.0f  p90 %.0f  p99 %.0f  max %.0f\n",
              Percentile(a.latency_ms, 0.5), Percentile(a.latency_ms, 0.9),
              Percentile(a.latency_ms, 0.99), Percentile(a.latency_ms, 1.0));
  std::printf(
      "  of which visible to read by a poll: p50 %.0f  p99 %.0f; read to delivered: p50 %.0f  "
      "p99 %.0f\n",
      Percentile(a.read_ms, 0.5), Percentile(a.read_ms, 0.99), Percentile(a.delivered_ms, 0.5),
      Percentile(a.delivered_ms, 0.99));
  std::printf("detector process CPU: %.3f cores (%.2f s over %.1f s)\n", cpu / wall, cpu, wall);
}

// Schedules a notice at a random time of the window for a `notice_fraction` of `ids` on the
// emulator at `base`; when each becomes visible. Empty on failure (printed).
std::map<std::string, int64_t> ScheduleNotices(const Flags& f, const std::string& base,
                                               const std::vector<std::string>& ids,
                                               const std::vector<d::Cloud>& clouds, int64_t t0,
                                               bool* ok) {
  std::mt19937 rng(f.seed);
  std::uniform_int_distribution<int64_t> when(t0 + 2000, t0 + f.window_s * 1000 - 4000);
  std::bernoulli_distribution pick(f.notice_fraction);
  std::map<std::string, int64_t> visible_at;
  *ok = true;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!pick(rng)) continue;
    const int64_t at = when(rng);
    const std::string url = base + "/emulator/notice?instance=" + ids[i] +
                            "&cloud=" + std::string(d::CloudName(clouds[i])) +
                            "&at_ms=" + std::to_string(at);
    // Through the launcher's one libcurl wrapper, as the local provider posts its notices.
    const auto sent = spotdnn::launcher::HttpSend({.method = "POST", .url = url});
    if (!sent.ok() || sent->status != 200) {
      std::fprintf(stderr, "scheduling a notice failed (%s)\n",
                   sent.ok() ? ("HTTP " + std::to_string(sent->status)).c_str()
                             : std::string(sent.status().message()).c_str());
      *ok = false;
      break;
    }
    visible_at[ids[i]] = at;
  }
  return visible_at;
}

// The replicas mode (see the file comment).
int RunReplicas(const Flags& f, const std::string& base, const std::filesystem::path& tmp,
                const std::vector<std::string>& ids, const std::vector<d::Cloud>& clouds) {
  namespace tu = ::spotdnn::testing_util;
  std::string dsn = f.store;
  std::string where = "the PostgreSQL at " + f.store;
  if (f.store == "postgres") {
    // The tests' throwaway server (stopped when this process ends).
    auto db = tu::FreshStoreSpec(tu::StoreBackend::kPostgres, "");
    if (!db.ok()) {
      std::fprintf(stderr, "%s\n", std::string(db.status().message()).c_str());
      return 1;
    }
    dsn = *db;
    where = "a throwaway PostgreSQL on 127.0.0.1:" +
            std::to_string(tu::SharedPostgresServer().value()->port());
  } else if (f.store.rfind("postgres://", 0) != 0 && f.store.rfind("postgresql://", 0) != 0) {
    std::fprintf(stderr, "--store %s: replicas share a PostgreSQL store (postgres or a URI)\n",
                 f.store.c_str());
    return 2;
  }
  const std::filesystem::path logs = f.logs_dir.empty() ? tmp : std::filesystem::path(f.logs_dir);
  if (!f.logs_dir.empty()) std::filesystem::create_directories(logs);
  std::vector<std::unique_ptr<tu::Child>> replicas;  // killed on an early return
  std::vector<std::unique_ptr<pb::Detector::Stub>> stubs;
  for (int r = 0; r < f.replicas; ++r) {
    const std::string id = "r" + std::to_string(r);
    const std::string port_file = (tmp / ("port-" + id)).string();
    replicas.push_back(std::make_unique<tu::Child>(
        std::vector<std::string>{f.detector, "--listen=127.0.0.1:0", "--port_file=" + port_file,
                                 "--store=" + dsn, "--replica_id=" + id,
                                 "--poll_interval=" + std::to_string(f.interval_ms) + "ms",
                                 "--request_timeout=800ms", "--gce_long_poll_timeout_s=30",
                                 "--lease=" + std::to_string(f.lease_ms) + "ms"},
        (logs / (id + ".log")).string()));
    const int port = tu::ReadPort(port_file);
    if (port == 0) {
      std::fprintf(stderr, "replica %s did not start (see %s)\n", id.c_str(),
                   (logs / (id + ".log")).c_str());
      return 1;
    }
    stubs.push_back(pb::Detector::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                              grpc::InsecureChannelCredentials())));
  }
  auto status_of = [&](int r) {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    pb::ReplicaStatusResponse status;
    (void)stubs[r]->ReplicaStatus(&c, {}, &status);
    return status;
  };
  const int watcher = f.replicas - 1;
  for (int i = 0; i < 200 && status_of(watcher).live_replicas_size() < f.replicas; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const auto register_start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < ids.size(); ++i) {
    pb::RegisterInstanceRequest request;
    request.mutable_instance()->set_instance_id(ids[i]);
    request.mutable_instance()->set_job_id("bench");
    request.mutable_instance()->set_cloud(static_cast<pb::Cloud>(clouds[i]));
    request.mutable_instance()->set_metadata_endpoint(base + "/i/" + ids[i]);
    grpc::ClientContext c;
    pb::RegisterInstanceResponse response;
    const grpc::Status s = stubs[0]->RegisterInstance(&c, request, &response);
    if (!s.ok()) {
      std::fprintf(stderr, "registering %s: %s\n", ids[i].c_str(), s.error_message().c_str());
      return 1;
    }
  }
  const double register_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - register_start).count();
  // Warm-up: every instance answered once (as the watching replica reads the registry).
  const auto warm_start = std::chrono::steady_clock::now();
  size_t healthy = 0;
  while (std::chrono::steady_clock::now() - warm_start < std::chrono::seconds(60)) {
    grpc::ClientContext c;
    pb::ListInstancesResponse listed;
    (void)stubs[watcher]->ListInstances(&c, {}, &listed);
    healthy = 0;
    for (const auto& w : listed.instances()) healthy += w.state() == pb::INSTANCE_STATE_HEALTHY;
    if (healthy == ids.size()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  std::string names;
  for (int r = 0; r < f.replicas; ++r) names += (r ? " r" : "r") + std::to_string(r);
  std::printf(
      "instances %zu (%s), interval %d ms, registered in %.1f s, healthy after warm-up %zu "
      "(%.1f s)\n",
      ids.size(), f.cloud.c_str(), f.interval_ms, register_s, healthy,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - warm_start).count());

  const int64_t t0 =
      ::spotdnn::base::RealClock::Get().NowUnixMs() + 3000 + 5 * static_cast<int64_t>(ids.size());
  bool scheduled = false;
  const std::map<std::string, int64_t> visible_at =
      ScheduleNotices(f, base, ids, clouds, t0, &scheduled);
  if (!scheduled) return 1;
  if (::spotdnn::base::RealClock::Get().NowUnixMs() > t0) {
    std::fprintf(stderr, "scheduling the notices overran the window start\n");
    return 1;
  }
  // The subscriber: one WatchEvents stream on the last replica, from the newest event on; if the
  // stream breaks it resumes after the last event it read (as spotdnn watch does), and says so.
  const uint64_t first_after = status_of(watcher).last_sequence();
  std::mutex mu;
  Arrivals arrivals;
  int stream_breaks = 0;
  std::atomic<bool> stop_watching{false};
  grpc::ClientContext* watch_context = nullptr;  // guarded by mu
  std::thread subscriber([&] {
    uint64_t after = first_after;
    while (!stop_watching) {
      grpc::ClientContext context;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stop_watching) break;
        watch_context = &context;
      }
      pb::WatchEventsRequest request;
      request.set_after_sequence(after);
      auto reader = stubs[watcher]->WatchEvents(&context, request);
      pb::RevocationEvent e;
      while (reader->Read(&e)) {
        after = e.sequence();
        const int64_t now = ::spotdnn::base::RealClock::Get().NowUnixMs();
        std::lock_guard<std::mutex> lock(mu);
        arrivals.Add(e.instance_id(), e.kind() == pb::RevocationEvent::KIND_NOTICE,
                     e.notice_unix_ms(), visible_at, now);
      }
      const grpc::Status s = reader->Finish();
      std::lock_guard<std::mutex> lock(mu);
      watch_context = nullptr;
      if (stop_watching) break;
      ++stream_breaks;
      std::fprintf(stderr, "subscriber: stream ended (%s); resuming after %llu\n",
                   s.error_message().c_str(), static_cast<unsigned long long>(after));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  while (::spotdnn::base::RealClock::Get().NowUnixMs() < t0)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::vector<double> cpu0;
  for (const auto& r : replicas) cpu0.push_back(ChildCpuSeconds(r->pid()));
  std::vector<double> cpu1(replicas.size(), -1);
  const auto wall0 = std::chrono::steady_clock::now();
  const int64_t end = t0 + f.window_s * 1000;
  const int64_t kill_at = f.kill_replica_at_s > 0
                              ? t0 + static_cast<int64_t>(f.kill_replica_at_s * 1000)
                              : std::numeric_limits<int64_t>::max();
  bool killed = false;
  // The instances' states as the watching replica has them, every 10 s of the window.
  std::vector<std::string> snapshots;
  int64_t next_snapshot = t0 + 10000;
  while (::spotdnn::base::RealClock::Get().NowUnixMs() < end) {
    if (!killed && ::spotdnn::base::RealClock::Get().NowUnixMs() >= kill_at) {
      cpu1[0] = ChildCpuSeconds(replicas[0]->pid());
      replicas[0]->Kill();
      killed = true;
    }
    if (::spotdnn::base::RealClock::Get().NowUnixMs() >= next_snapshot) {
      grpc::ClientContext c;
      c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      pb::ListInstancesResponse listed;
      (void)stubs[watcher]->ListInstances(&c, {}, &listed);
      std::map<std::string, int> states;
      for (const auto& w : listed.instances()) {
        std::string state = pb::InstanceState_Name(w.state());
        if (!w.reason().empty() && w.state() != pb::INSTANCE_STATE_NOTICE) {
          state += ": " + w.reason().substr(0, 60);
        }
        ++states[state];
      }
      std::string line = "at " + std::to_string((next_snapshot - t0) / 1000) + " s:";
      for (const auto& [state, n] : states) line += " " + std::to_string(n) + " x " + state + ";";
      snapshots.push_back(line);
      next_snapshot += 10000;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  double cpu = 0;
  for (size_t r = 0; r < replicas.size(); ++r) {
    if (cpu1[r] < 0) cpu1[r] = ChildCpuSeconds(replicas[r]->pid());
    cpu += cpu1[r] - cpu0[r];
  }
  // On time: within one more poll interval and 2 s. Then late events are waited for, up to
  // --drain_s, or until every notice has arrived.
  const int64_t on_time_by = end + f.interval_ms + 2000;
  const int64_t drain_until = std::max(on_time_by, end + int64_t{f.drain_s} * 1000);
  while (::spotdnn::base::RealClock::Get().NowUnixMs() < on_time_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  while (::spotdnn::base::RealClock::Get().NowUnixMs() < drain_until) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (arrivals.Arrived(visible_at) == visible_at.size()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double waited_s =
      static_cast<double>(::spotdnn::base::RealClock::Get().NowUnixMs() - end) / 1000;
  {
    std::lock_guard<std::mutex> lock(mu);
    stop_watching = true;
    if (watch_context != nullptr) watch_context->TryCancel();
  }
  subscriber.join();

  // Which of the notices with no event on the stream were never written: a replay of the log on
  // another replica (the second one; the last one when there are two), independent of the stream.
  const int checker = f.replicas > 2 ? 1 : watcher;
  const uint64_t newest = status_of(checker).last_sequence();
  std::set<std::string> written;
  if (newest > first_after) {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    pb::WatchEventsRequest request;
    request.set_after_sequence(first_after);
    auto reader = stubs[checker]->WatchEvents(&c, request);
    pb::RevocationEvent e;
    while (reader->Read(&e)) {
      if (e.kind() == pb::RevocationEvent::KIND_NOTICE) written.insert(e.instance_id());
      if (e.sequence() >= newest) break;
    }
    c.TryCancel();
  }
  std::map<std::string, pb::WatchedInstance> listed;
  {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    pb::ListInstancesResponse response;
    (void)stubs[checker]->ListInstances(&c, {}, &response);
    for (const auto& w : response.instances()) listed[w.instance_id()] = w;
  }

  const auto status = status_of(watcher);
  std::string live;
  for (const std::string& r : status.live_replicas()) live += (live.empty() ? "" : ",") + r;
  std::printf("replicas %d (%s) on %s, lease %d ms; %s; live at the end: %s\n", f.replicas,
              names.c_str(), where.c_str(), f.lease_ms,
              killed ? ("r0 killed -9 at " + std::to_string(f.kill_replica_at_s).substr(0, 4) +
                        " s into the window")
                           .c_str()
                     : "none killed",
              live.c_str());
  std::lock_guard<std::mutex> lock(mu);
  PrintSummary(visible_at, arrivals, on_time_by, waited_s, cpu, wall);
  int never_written = 0, not_streamed = 0;
  std::map<std::string, int> lost_by_state;
  for (const auto& [id, at] : visible_at) {
    if (arrivals.first_ms.count(id)) continue;
    written.count(id) ? ++not_streamed : ++never_written;
    auto it = listed.find(id);
    const std::string state =
        it == listed.end()
            ? "not listed"
            : pb::InstanceState_Name(it->second.state()) + " on " + it->second.replica() +
                  (it->second.reason().empty() ? "" : ": " + it->second.reason().substr(0, 100));
    ++lost_by_state[state];
  }
  std::printf(
      "lost: %d never written to the event log, %d written but not on the stream; "
      "stream breaks %d\n",
      never_written, not_streamed, stream_breaks);
  for (const auto& [state, n] : lost_by_state) std::printf("  lost: %d x %s\n", n, state.c_str());
  // When notices became visible and when their events arrived, by 5 s from the window's start.
  std::map<int64_t, std::pair<int, int>> timeline;
  for (const auto& [id, at] : visible_at) ++timeline[(at - t0) / 5000].first;
  for (const auto& [id, at] : arrivals.first_ms) ++timeline[(at - t0) / 5000].second;
  std::string line;
  for (const auto& [bucket, n] : timeline) {
    line += " " + std::to_string(bucket * 5) + "s:" + std::to_string(n.first) + "/" +
            std::to_string(n.second);
  }
  std::printf("visible/arrived by 5 s of the window:%s\n", line.c_str());
  for (const std::string& snapshot : snapshots) std::printf("  states %s\n", snapshot.c_str());
  for (int r = killed ? 1 : 0; r < f.replicas; ++r) {
    const auto s = status_of(r);
    std::printf("  replica %s: lease changes %llu, store errors %llu%s%s\n", s.replica().c_str(),
                static_cast<unsigned long long>(s.lease_changes()),
                static_cast<unsigned long long>(s.store_errors()),
                s.last_store_error().empty() ? "" : ", last: ",
                s.last_store_error().substr(0, 160).c_str());
  }
  for (auto& r : replicas) r->Stop();  // SIGTERM: each gives its lease up
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const auto tmp =
      std::filesystem::temp_directory_path() / ("detector_load_bench_" + std::to_string(getpid()));
  std::filesystem::create_directories(tmp);
  const std::string port_file = (tmp / "port").string();

  // The emulator, as its own process.
  const pid_t emulator = fork();
  if (emulator == 0) {
    const std::string threads = "--threads=" + std::to_string(f.emulator_threads);
    const std::string pf = "--port_file=" + port_file;
    execl(f.emulator.c_str(), f.emulator.c_str(), "--host=127.0.0.1", "--port=0", pf.c_str(),
          threads.c_str(), static_cast<char*>(nullptr));
    std::perror("exec spotdnn-metadata-emulator");
    _exit(127);
  }
  int port = 0;
  for (int i = 0; i < 200 && port == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    std::ifstream in(port_file);
    in >> port;
  }
  if (port == 0) {
    std::fprintf(stderr, "emulator did not start (%s)\n", f.emulator.c_str());
    kill(emulator, SIGTERM);
    return 1;
  }
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  // Whatever happens from here on, the emulator process goes too.
  struct StopEmulator {
    pid_t pid;
    ~StopEmulator() {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
  } stop_emulator{emulator};

  std::vector<std::string> ids;
  std::vector<d::Cloud> clouds;
  const d::Cloud mix[3] = {d::Cloud::kAws, d::Cloud::kAzure, d::Cloud::kGce};
  for (int i = 0; i < f.instances; ++i) {
    char id[32];
    std::snprintf(id, sizeof(id), "i-%06d", i);
    ids.push_back(id);
    clouds.push_back(f.cloud == "mixed" ? mix[i % 3] : *d::ParseCloud("--cloud", f.cloud));
  }
  if (f.replicas > 1 || f.store != "sqlite") {
    const int code = RunReplicas(f, base, tmp, ids, clouds);
    std::filesystem::remove_all(tmp);
    return code;
  }

  d::DetectorOptions options;
  options.db_path = (tmp / "detector.db").string();
  options.poller.interval = absl::Milliseconds(f.interval_ms);
  options.poller.request_timeout = absl::Milliseconds(800);
  // cpp-httplib listens with a backlog of 5: a thousand first connects overflow it and wait for
  // SYN retransmits. That is the emulator's limit, not the detector's, so connects may take 3 s.
  options.poller.connect_timeout = absl::Seconds(3);
  options.poller.max_connections_per_host = f.connections;
  options.poller.gce_long_poll_timeout_s = 30;
  auto opened = d::Detector::Open(options);
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", std::string(opened.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<d::Detector> detector = *std::move(opened);

  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string& id = ids[i];
    const d::Cloud cloud = clouds[i];
    d::WatchedInstance w;
    w.instance_id = id;
    w.job_id = "bench";
    w.cloud = cloud;
    w.metadata_endpoint = base + "/i/" + id;
    if (auto s = detector->Register(w); !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  // Warm-up: every instance answered once.
  const auto warm_start = std::chrono::steady_clock::now();
  size_t healthy = 0;
  while (std::chrono::steady_clock::now() - warm_start < std::chrono::seconds(30)) {
    healthy = 0;
    for (const auto& w : detector->List("")) healthy += w.state == d::InstanceState::kHealthy;
    if (healthy == ids.size()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::map<std::string, int> reasons;
  for (const auto& w : detector->List("")) {
    if (w.state != d::InstanceState::kHealthy) ++reasons[w.reason.substr(0, 120)];
  }
  for (const auto& [reason, n] : reasons)
    std::printf("  not healthy: %d x %s\n", n, reason.c_str());
  std::printf("instances %d (%s), interval %d ms, healthy after warm-up %zu (%.1f s)\n",
              f.instances, f.cloud.c_str(), f.interval_ms, healthy,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - warm_start).count());

  // Notices at random times within the window.
  // The window starts once every notice is scheduled (allowing 5 ms per notice for that).
  const int64_t t0 =
      ::spotdnn::base::RealClock::Get().NowUnixMs() + 3000 + 5 * static_cast<int64_t>(ids.size());
  bool scheduled = false;
  const std::map<std::string, int64_t> visible_at =
      ScheduleNotices(f, base, ids, clouds, t0, &scheduled);
  if (!scheduled) return 1;

  // The subscriber, and the measurement window.
  Arrivals arrivals;
  if (::spotdnn::base::RealClock::Get().NowUnixMs() > t0) {
    std::fprintf(stderr, "scheduling the notices overran the window start\n");
    return 1;
  }
  while (::spotdnn::base::RealClock::Get().NowUnixMs() < t0)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double cpu0 = CpuSeconds();
  const auto wall0 = std::chrono::steady_clock::now();
  // Notices appear until 4 s before the end; the last seconds let late events arrive.
  const int64_t end = t0 + f.window_s * 1000;
  uint64_t cursor = detector->last_sequence();
  // After the window, events keep being read (not counted in the CPU figure): on time within one
  // poll interval and 2 s, late after that, up to --drain_s or until every notice has arrived.
  const int64_t on_time_by = end + f.interval_ms + 2000;
  const int64_t drain_until = std::max(on_time_by, end + int64_t{f.drain_s} * 1000);
  bool window_open = true;
  double wall = 0, cpu = 0;
  while (true) {
    const int64_t now = ::spotdnn::base::RealClock::Get().NowUnixMs();
    if (window_open && now >= end) {
      window_open = false;
      wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
      cpu = CpuSeconds() - cpu0;
    }
    if (now >= drain_until ||
        (now >= on_time_by && arrivals.Arrived(visible_at) == visible_at.size())) {
      break;
    }
    detector->WaitForEvents(cursor, absl::Milliseconds(100));
    auto events = detector->EventsAfter(cursor, "", 10000, &cursor);
    const int64_t read_at = ::spotdnn::base::RealClock::Get().NowUnixMs();
    for (const d::Event& e : *events) {
      arrivals.Add(e.instance_id, e.kind == d::EventKind::kNotice, e.notice_unix_ms, visible_at,
                   read_at);
    }
  }
  const double waited_s =
      static_cast<double>(::spotdnn::base::RealClock::Get().NowUnixMs() - end) / 1000;

  PrintSummary(visible_at, arrivals, on_time_by, waited_s, cpu, wall);

  detector->Shutdown();
  detector.reset();
  std::filesystem::remove_all(tmp);
  return 0;
}
