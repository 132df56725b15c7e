// Reading samples out of a Prometheus text-format scrape (services/common/metrics.h), for tests.
#ifndef SPOTDNN_TESTS_TESTING_METRICS_SAMPLE_H_
#define SPOTDNN_TESTS_TESTING_METRICS_SAMPLE_H_

#include <sstream>
#include <string>

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

}  // namespace spotdnn::testing_util

#endif  // SPOTDNN_TESTS_TESTING_METRICS_SAMPLE_H_
