// Reading samples out of a Prometheus text-format scrape (base/metrics.h), for tests.
#ifndef SPOTDNN_TESTS_TESTING_METRICS_SAMPLE_H_
#define SPOTDNN_TESTS_TESTING_METRICS_SAMPLE_H_

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

namespace spotdnn::testing_util {

// The sum of the samples of `metric` (a name, with its labels as written, "name{a=\"x\",b=\"y\"}",
// or its start, "name{a=\"x\""), over every label set it matches; -1 when none does.
inline double SampleSum(const std::string& scrape, const std::string& metric) {
  std::istringstream lines(scrape);
  double sum = -1;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(metric, 0) != 0 || line[0] == '#') continue;
    const std::string rest = line.substr(metric.size());
    // A whole name ("name" must not match "name_total"): labels or the value follow.
    if (metric.back() != '}' && metric.back() != '"' && rest[0] != '{' && rest[0] != ' ') continue;
    const size_t space = line.rfind(' ');
    sum = (sum < 0 ? 0 : sum) + std::stod(line.substr(space + 1));
  }
  return sum;
}

// The metrics port a service logged in `log` ("metrics on http://127.0.0.1:PORT/metrics"),
// waiting up to 10 s for the line; 0 when it did not come.
inline int LoggedMetricsPort(const std::string& log) {
  const std::regex pattern("metrics on http://127\\.0\\.0\\.1:([0-9]+)/metrics");
  for (int i = 0; i < 500; ++i) {
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    const std::string content = text.str();
    std::smatch match;
    if (std::regex_search(content, match, pattern)) return std::stoi(match[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

}  // namespace spotdnn::testing_util

#endif  // SPOTDNN_TESTS_TESTING_METRICS_SAMPLE_H_
