#include "services/common/server.h"

#include <malloc.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/metrics.h"
#include "google/protobuf/descriptor.h"
#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/support/server_interceptor.h"
#include "services/common/metrics_server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "spotdnn/v1/detector.grpc.pb.h"
#include "spotdnn/v1/predictor.grpc.pb.h"
#include "spotdnn/v1/profiler.grpc.pb.h"
#include "spotdnn/v1/provisioner.grpc.pb.h"

namespace spotdnn::services {
namespace {

// Calls being answered (from their start until their status is sent, or they are destroyed) but
// for the streams that only wait.
std::atomic<int> g_calls_in_flight{0};

// Streams a client holds open to be told things: shutdown does not wait for them.
const std::set<std::string, std::less<>> kWaitingStreams = {"/grpc.health.v1.Health/Watch",
                                                            "/spotdnn.v1.Detector/WatchEvents",
                                                            "/spotdnn.v1.Detector/AgentStream"};

// Turns gRPC's answer to a request it could not parse (INTERNAL with an empty message: the
// handler never ran, and no handler of ours answers INTERNAL without a message) into
// INVALID_ARGUMENT naming the message type. Streams read their messages themselves (see the
// profiler's ReportSamples and the detector's AgentStream), so only unary and server-streaming
// calls get it.
class UnparsableRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit UnparsableRequestInterceptor(const char* method) : method_(method) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      if (status.error_code() == grpc::StatusCode::INTERNAL && status.error_message().empty()) {
        methods->ModifySendStatus(
            grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, UnparsableRequestMessage(method_)));
      }
    }
    methods->Proceed();
  }

 private:
  const char* method_;
};

class UnparsableRequestInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    using Type = grpc::experimental::ServerRpcInfo::Type;
    if (info->type() != Type::UNARY && info->type() != Type::SERVER_STREAMING) return nullptr;
    return new UnparsableRequestInterceptor(info->method());
  }
};

// Counts every call by method and status code and observes its duration by method, into the
// default registry: spotdnn_rpc_requests_total{method,code} and spotdnn_rpc_duration_seconds
// {method}. A call is timed from the interceptor's creation (the call's start) to its status
// being sent. The method label is one of the server's own methods or "unknown": a client must
// not be able to make a label (and memory in every scrape) per name it makes up.
// It also counts the calls in flight that shutdown waits for (CallsInFlight).
class RpcMetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(std::string method, bool in_flight)
      : method_(std::move(method)), start_(absl::Now()), in_flight_(in_flight) {
    if (in_flight_) g_calls_in_flight.fetch_add(1);
  }
  ~RpcMetricsInterceptor() override { Done(); }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const absl::StatusCode code =
          static_cast<absl::StatusCode>(methods->GetSendStatus().error_code());
      static auto& requests = metrics::DefaultRegistry().Counters(
          "spotdnn_rpc_requests_total", "gRPC calls answered, by method and status code",
          {"method", "code"});
      static auto& durations = metrics::DefaultRegistry().Histograms(
          "spotdnn_rpc_duration_seconds",
          "gRPC call durations from the call's start to its status, by method", {"method"},
          metrics::LatencyBuckets());
      requests.WithLabels({method_, absl::StatusCodeToString(code)}).Increment();
      durations.WithLabels({method_}).Observe(absl::ToDoubleSeconds(absl::Now() - start_));
      // Answered: no longer work in flight (gRPC may destroy the call a little later).
      Done();
    }
    methods->Proceed();
  }

 private:
  void Done() {
    if (in_flight_) g_calls_in_flight.fetch_sub(1);
    in_flight_ = false;
  }

  std::string method_;
  absl::Time start_;
  bool in_flight_;
};

class RpcMetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcMetricsInterceptorFactory(std::set<std::string, std::less<>> methods)
      : methods_(std::move(methods)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const char* method = info->method();
    const bool known = method != nullptr && methods_.count(absl::string_view(method)) > 0;
    // Streams that only wait for something to tell (health Watch, WatchEvents, AgentStream) are
    // not work in flight: shutdown ends them at once.
    const bool waits = known && kWaitingStreams.count(absl::string_view(method)) > 0;
    return new RpcMetricsInterceptor(known ? std::string(method) : std::string(kUnknownMethod),
                                     !waits);
  }

 private:
  const std::set<std::string, std::less<>> methods_;
};

// The spotdnn services among `services`, by full name, for per-service health.
std::vector<std::string> SpotdnnServiceNames(const std::vector<grpc::Service*>& services) {
  std::vector<std::string> names;
  for (grpc::Service* s : services) {
    if (dynamic_cast<v1::Predictor::Service*>(s) != nullptr) {
      names.push_back(v1::Predictor::service_full_name());
    } else if (dynamic_cast<v1::Provisioner::Service*>(s) != nullptr) {
      names.push_back(v1::Provisioner::service_full_name());
    } else if (dynamic_cast<v1::Profiler::Service*>(s) != nullptr) {
      names.push_back(v1::Profiler::service_full_name());
    } else if (dynamic_cast<v1::Detector::Service*>(s) != nullptr) {
      names.push_back(v1::Detector::service_full_name());
    }
  }
  return names;
}

// The full method names ("/spotdnn.v1.Predictor/Predict") a server with `services` answers: the
// spotdnn services' methods, the health service's and reflection's. The closed set of values of
// the metrics' method label.
std::set<std::string, std::less<>> ServedMethods(const std::vector<grpc::Service*>& services) {
  std::set<std::string, std::less<>> methods = {
      "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch",
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"};
  for (const std::string& name : SpotdnnServiceNames(services)) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
    if (service == nullptr) continue;
    for (int i = 0; i < service->method_count(); ++i) {
      methods.insert(absl::StrCat("/", name, "/", service->method(i)->name()));
    }
  }
  return methods;
}

// Runs malloc_trim(0) on a background thread shortly after it is asked to (see
// ReleaseMemorySoon); several requests close together make one trim.
class MemoryTrimmer {
 public:
  MemoryTrimmer() : thread_([this] { Run(); }) {}
  ~MemoryTrimmer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Request() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      requested_ = true;
    }
    cv_.notify_all();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return stop_ || requested_; });
      if (stop_) return;
      requested_ = false;
      // Let the call that asked finish sending and freeing its answer first; once more later,
      // for an answer that took long to send.
      for (const auto delay : {std::chrono::milliseconds(200), std::chrono::milliseconds(2000)}) {
        if (cv_.wait_for(lock, delay, [this] { return stop_; })) return;
        lock.unlock();
        malloc_trim(0);
        lock.lock();
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool requested_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

std::string UnparsableRequestMessage(absl::string_view method) {
  // "/spotdnn.v1.Profiler/ImportLog" -> "spotdnn.v1.Profiler.ImportLog".
  std::string name(absl::StripPrefix(method, "/"));
  std::replace(name.begin(), name.end(), '/', '.');
  const google::protobuf::MethodDescriptor* descriptor =
      google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(name);
  const std::string type =
      descriptor != nullptr ? descriptor->input_type()->full_name() : std::string("request");
  return absl::StrCat("the request could not be parsed as a ", type,
                      " message: malformed protobuf bytes, or a string field that is not valid "
                      "UTF-8");
}

std::function<absl::Status()> CallStopCheck(const grpc::ServerContext* context,
                                            absl::Duration max_duration, std::string work,
                                            std::string limit_name) {
  const auto deadline = context->deadline();
  const absl::Duration call = deadline == std::chrono::system_clock::time_point::max()
                                  ? absl::InfiniteDuration()
                                  : absl::FromChrono(deadline - std::chrono::system_clock::now());
  const bool server_cap = max_duration < call;
  const absl::Time start = absl::Now();
  const absl::Time stop_at = start + std::min(call, max_duration);
  return [=]() -> absl::Status {
    const absl::Time now = absl::Now();
    if (now >= stop_at) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "%s was stopped after %.1f s, at %s", work, absl::ToDoubleSeconds(now - start),
          server_cap ? absl::StrCat("the server's limit on one call's work (", limit_name, " = ",
                                    absl::FormatDuration(max_duration), ")")
                     : std::string("the call's deadline")));
    }
    if (context->IsCancelled()) {
      return absl::CancelledError(
          absl::StrCat(work,
                       " was stopped: the call was cancelled (the client left, or the server is "
                       "shutting down)"));
    }
    return absl::OkStatus();
  };
}

void ReleaseMemorySoon() {
  static MemoryTrimmer* trimmer = new MemoryTrimmer();  // lives as long as the process
  trimmer->Request();
}

absl::StatusOr<StartedServer> StartServer(const std::string& listen,
                                          const std::vector<grpc::Service*>& services,
                                          const ServerSecurity& security) {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (!listen.empty()) {
    auto made = MakeServerCredentials(listen, security);
    if (!made.ok()) return made.status();
    credentials = *std::move(made);
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  StartedServer started;
  if (!listen.empty()) {
    builder.AddListeningPort(listen, credentials, &started.port);
  }
  // The sync server's polling threads wait this long for work before looking again; gRPC's 10 s
  // default held a shutdown that long after the last call had ended.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::CQ_TIMEOUT_MSEC, 200);
  // gRPC sets SO_REUSEPORT on its listeners by default: a second server on a taken address would
  // then start too, and the kernel would split the connections between the two. Without it the
  // second one cannot bind and says so.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<UnparsableRequestInterceptorFactory>());
  // After the one above, so that it counts the status that one rewrites.
  interceptors.push_back(std::make_unique<RpcMetricsInterceptorFactory>(ServedMethods(services)));
  metrics::DefaultRegistry().GaugeFunction(
      "spotdnn_rpc_calls_in_flight",
      "gRPC calls being answered now (streams that only wait to be told something excluded)",
      [] { return static_cast<double>(CallsInFlight()); });
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  for (grpc::Service* service : services) builder.RegisterService(service);
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || (!listen.empty() && started.port == 0)) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on \"", listen,
                     "\": the address is in use (another server listens there) or invalid"));
  }
  if (grpc::HealthCheckServiceInterface* health = started.server->GetHealthCheckService()) {
    for (const std::string& name : SpotdnnServiceNames(services)) {
      health->SetServingStatus(name, true);
    }
  }
  return started;
}

int CallsInFlight() { return g_calls_in_flight.load(); }

void ShutdownWithin(grpc::Server& server, absl::Duration grace) {
  const auto deadline = std::chrono::system_clock::now() + absl::ToChronoNanoseconds(grace);
  std::atomic<bool> begun{false};
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    begun = true;
    server.Shutdown(deadline);  // refuses new calls; cancels what is left at the deadline
    done = true;
  });
  // gRPC's Shutdown also waits, up to its deadline, for clients to close their connections, even
  // with no call in flight: once none is, end the connections (again every 20 ms, for one that
  // came in while Shutdown was starting).
  while (!done && std::chrono::system_clock::now() < deadline) {
    if (begun && CallsInFlight() == 0) grpc_server_cancel_all_calls(server.c_server());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stopper.join();
  server.Wait();
}

void BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForShutdownSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int signal = 0;
  while (sigwait(&set, &signal) != 0) {
  }
  return signal;
}

int ServeUntilSignal(const std::string& service_name, const std::string& listen,
                     const std::string& port_file, const std::string& metrics_listen,
                     const std::vector<grpc::Service*>& services, const ServerSecurity& security,
                     const std::function<bool()>& serving) {
  auto logger = spdlog::get(service_name);
  if (!logger) logger = spdlog::stderr_color_mt(service_name);
  // gRPC shuts its library down when its last object goes, joining its executor threads, one of
  // which may be waiting in epoll for up to 10 s: the process keeps one reference to the library
  // for its life, so that exiting never waits for that.
  static const bool kept = [] {
    grpc_init();
    return true;
  }();
  (void)kept;
  std::unique_ptr<MetricsServer> metrics_server;
  if (!metrics_listen.empty()) {
    auto started =
        MetricsServer::Start("--metrics_listen", metrics_listen, metrics::DefaultRegistry());
    if (!started.ok()) {
      logger->error("{}", std::string(started.status().message()));
      return absl::IsInvalidArgument(started.status()) ? 2 : 1;
    }
    metrics_server = *std::move(started);
    logger->info("metrics on http://{}:{}/metrics", metrics_server->host(), metrics_server->port());
  }
  auto started = StartServer(listen, services, security);
  if (!started.ok()) {
    logger->error("{}", std::string(started.status().message()));
    return absl::IsInvalidArgument(started.status()) ? 2 : 1;
  }
  const std::string host = listen.substr(0, listen.rfind(':'));
  logger->info("listening on {}:{} ({}{}{})", host, started->port,
               security.tls() ? "TLS" : "plaintext",
               security.tls_client_ca_file.empty() ? "" : ", client certificates required",
               security.auth_token_file.empty() ? "" : ", bearer token required");
  if (!port_file.empty()) {
    std::ofstream out(port_file, std::ios::trunc);
    out << started->port << "\n";
    if (!out) {
      logger->error("cannot write port file {}", port_file);
      started->server->Shutdown();
      return 1;
    }
  }
  std::atomic<bool> stop_health{false};
  std::thread health_thread;
  grpc::HealthCheckServiceInterface* health = started->server->GetHealthCheckService();
  if (serving && health != nullptr) {
    health_thread = std::thread([&] {
      std::optional<bool> was;
      while (!stop_health) {
        const bool now = serving();
        if (was != now) {
          health->SetServingStatus(now);  // "" and every service
          if (was.has_value()) {
            logger->warn("health: {}", now ? "SERVING again" : "NOT_SERVING");
          }
          was = now;
        }
        for (int i = 0; i < 10 && !stop_health; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
    });
  }
  const int signal = WaitForShutdownSignal();
  stop_health = true;
  if (health_thread.joinable()) health_thread.join();
  logger->info("signal {} received; shutting down ({} calls in flight, {} s for them to finish)",
               signal, CallsInFlight(), absl::ToDoubleSeconds(kShutdownGrace));
  // Whatever happens in the handlers, the process is gone shortly after the grace: a handler that
  // does not stop when its call is cancelled must not hold SIGTERM.
  static std::atomic<bool> stopped{false};
  std::thread([logger] {
    const absl::Time give_up = absl::Now() + kShutdownGrace + absl::Seconds(1);
    while (!stopped && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(20));
    if (stopped) return;
    logger->warn("{} calls still running 1 s after the {} s grace; exiting without them",
                 CallsInFlight(), absl::ToDoubleSeconds(kShutdownGrace));
    logger->flush();
    std::_Exit(0);
  }).detach();
  ShutdownWithin(*started->server, kShutdownGrace);
  started->server.reset();  // its teardown is bounded by the watchdog too
  metrics_server.reset();
  stopped = true;
  logger->info("stopped");
  return 0;
}

}  // namespace spotdnn::services
