// The metrics registry and its text format (base/metrics.h), the --metrics_listen
// address parser, and GET /metrics served by MetricsServer.
#include "base/metrics.h"

#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "services/common/metrics_server.h"

namespace spotdnn::metrics {
namespace {

using ::testing::HasSubstr;

TEST(MetricsRegistry, RendersASmallRegistryExactly) {
  Registry registry;
  auto& requests = registry.Counters("app_requests_total", "Requests served.", {"method", "code"});
  requests.WithLabels({"/a.B/C", "OK"}).Increment(2);
  requests.WithLabels({"/a.B/C", "INVALID_ARGUMENT"}).Increment();
  registry.Gauges("app_temperature", "A gauge.", {}).WithLabels({}).Set(-1.5);
  registry.GaugeFunction("app_instances", "Read when rendered.", [] { return 7.0; });
  auto& latency = registry.Histograms("app_latency_seconds", "Latency.", {"method"}, {0.1, 1});
  latency.WithLabels({"m"}).Observe(0.05);
  latency.WithLabels({"m"}).Observe(0.5);
  latency.WithLabels({"m"}).Observe(3);

  EXPECT_EQ(registry.Render(),
            "# HELP app_instances Read when rendered.\n"
            "# TYPE app_instances gauge\n"
            "app_instances 7\n"
            "# HELP app_latency_seconds Latency.\n"
            "# TYPE app_latency_seconds histogram\n"
            "app_latency_seconds_bucket{method=\"m\",le=\"0.1\"} 1\n"
            "app_latency_seconds_bucket{method=\"m\",le=\"1\"} 2\n"
            "app_latency_seconds_bucket{method=\"m\",le=\"+Inf\"} 3\n"
            "app_latency_seconds_sum{method=\"m\"} 3.55\n"
            "app_latency_seconds_count{method=\"m\"} 3\n"
            "# HELP app_requests_total Requests served.\n"
            "# TYPE app_requests_total counter\n"
            "app_requests_total{method=\"/a.B/C\",code=\"INVALID_ARGUMENT\"} 1\n"
            "app_requests_total{method=\"/a.B/C\",code=\"OK\"} 2\n"
            "# HELP app_temperature A gauge.\n"
            "# TYPE app_temperature gauge\n"
            "app_temperature -1.5\n");
}

TEST(MetricsRegistry, EscapesLabelValuesAndHelp) {
  Registry registry;
  registry.Counters("x_total", "line one\nback\\slash \"quoted\"", {"path"})
      .WithLabels({"a\"b\\c\nd"})
      .Increment();
  EXPECT_EQ(registry.Render(),
            "# HELP x_total line one\\nback\\\\slash \"quoted\"\n"
            "# TYPE x_total counter\n"
            "x_total{path=\"a\\\"b\\\\c\\nd\"} 1\n");
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
}

TEST(MetricsRegistry, HistogramBucketsAreCumulativeAndBoundsInclusive) {
  Histogram h({1, 2, 5});
  for (double v : {0.5, 1.0, 1.5, 2.0, 4.0, 5.0, 9.0}) h.Observe(v);
  // le is "less than or equal": 1.0 falls in le="1", 2.0 in le="2", 5.0 in le="5".
  EXPECT_EQ(h.CumulativeCounts(), (std::vector<uint64_t>{2, 4, 6, 7}));
  EXPECT_EQ(h.count(), 7u);
  EXPECT_DOUBLE_EQ(h.sum(), 23.0);
}

TEST(MetricsRegistry, SameNameReturnsTheSameFamily) {
  Registry registry;
  auto& a = registry.Counters("c_total", "help", {"k"});
  auto& b = registry.Counters("c_total", "help", {"k"});
  EXPECT_EQ(&a, &b);
  a.WithLabels({"v"}).Increment();
  EXPECT_EQ(b.WithLabels({"v"}).value(), 1u);
  EXPECT_EQ(&a.WithLabels({"v"}), &b.WithLabels({"v"}));
}

TEST(MetricsRegistry, FormatsSpecialValues) {
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatValue(0.005), "0.005");
  EXPECT_EQ(FormatValue(42), "42");
}

TEST(MetricsListen, ParsesHostPortAndNamesTheFlagInErrors) {
  auto ok = services::ParseHostPort("--metrics_listen", "127.0.0.1:9090");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->host, "127.0.0.1");
  EXPECT_EQ(ok->port, 9090);
  auto v6 = services::ParseHostPort("--metrics_listen", "[::1]:0");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  for (const char* bad : {"9090", ":9090", "host:", "host:http", "host:70000", "host:-1"}) {
    auto parsed = services::ParseHostPort("--metrics_listen", bad);
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << bad;
    EXPECT_THAT(parsed.status().message(),
                HasSubstr(std::string("--metrics_listen = \"") + bad + "\""));
  }
}

TEST(MetricsServer, ServesTheRegistryOnGetMetrics) {
  Registry registry;
  registry.Counters("served_total", "help", {}).WithLabels({}).Increment(3);
  auto server = services::MetricsServer::Start("--metrics_listen", "127.0.0.1:0", registry);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  httplib::Client client("127.0.0.1", (*server)->port());
  auto got = client.Get("/metrics");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_THAT(got->get_header_value("Content-Type"), HasSubstr("version=0.0.4"));
  EXPECT_THAT(got->body, HasSubstr("served_total 3\n"));
  auto other = client.Get("/");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  // The same port again is in use.
  auto again = services::MetricsServer::Start(
      "--metrics_listen", "127.0.0.1:" + std::to_string((*server)->port()), registry);
  EXPECT_TRUE(absl::IsUnavailable(again.status())) << again.status();
}

}  // namespace
}  // namespace spotdnn::metrics
