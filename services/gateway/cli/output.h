// What the CLI prints for people: aligned tables and readable numbers.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_OUTPUT_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_OUTPUT_H_

#include <limits>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "spotdnn/v1/common.pb.h"

namespace spotdnn::gateway {

// A plain-text table: a header row, rows of cells, the first column left-aligned and the others
// right-aligned (they are numbers), columns two spaces apart.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Left-align these columns too (besides the first).
  void LeftAlign(size_t column) { left_.push_back(column); }
  void Print(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<size_t> left_;
};

// "39m 11s", "1h 05m", "12.3s".
std::string HumanDuration(double seconds);
// "$2.9859" (4 decimals under $100, 2 above).
std::string Dollars(double usd);
// A finite number as JSON: the shortest text that reads back as the same double.
std::string ShortestNumber(double value);
// A JSON string literal (quoted and escaped).
std::string JsonString(std::string_view text);
// Builds one JSON object field by field, in insertion order. Non-finite numbers become null.
class JsonObject {
 public:
  JsonObject& Number(std::string_view key, double value);
  JsonObject& Integer(std::string_view key, long long value);
  JsonObject& String(std::string_view key, std::string_view value);
  JsonObject& Bool(std::string_view key, bool value);
  // `json` must already be valid JSON (an object, array, ...).
  JsonObject& Raw(std::string_view key, std::string_view json);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void Key(std::string_view key);
  std::string body_;
};

// One point of a chart.
struct ChartPoint {
  double x = 0;
  double y = 0;
  std::string label;  // shown beside highlighted points (and as every point's tooltip)
  bool highlight = false;
  // In [0, 1] (e.g. a probability): the dot's colour on a red (0) to green (1) scale, with a
  // legend; NaN: the plain colour.
  double shade = std::numeric_limits<double>::quiet_NaN();
};

// An SVG line chart of `points` (joined in order as a step line, each a dot), axes with ticks,
// highlighted points in red with their label, and an optional vertical marker line at `marker_x`
// (NaN: none). Points with a shade are coloured by it, with a legend titled `shade_label`.
std::string SvgChart(const std::vector<ChartPoint>& points, std::string_view title,
                     std::string_view x_label, std::string_view y_label, double marker_x,
                     std::string_view marker_label, std::string_view shade_label = "");

// printf-style "%.*f".
std::string Fixed(double value, int decimals);

// A cluster for a table, "TYPE=N TYPE=N" ("-" when it has no instances), and for --json,
// {"TYPE": N, ...}; types with a count of 0 are left out of both.
std::string ClusterText(const ::spotdnn::v1::Cluster& cluster);
std::string ClusterJson(const ::spotdnn::v1::Cluster& cluster);

// A synchronous prediction's local batch of one type for a table: "64", or "37-38" when the split
// gives some of its ranks one sample more (the mean is then not whole).
std::string LocalBatchText(double local_batch);
// Its local batch per instance type for --json: {"TYPE": 37.5, ...}.
std::string LocalBatchesJson(const ::spotdnn::v1::Prediction& prediction);

// "1 worker", "2 workers", "0 workers".
std::string Plural(long long n, std::string_view one, std::string_view many);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_OUTPUT_H_
