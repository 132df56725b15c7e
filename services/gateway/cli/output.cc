#include "services/gateway/cli/output.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace spotdnn::gateway {

void Table::Print(std::ostream& out) const {
  std::vector<size_t> width(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  };
  measure(header_);
  for (const auto& row : rows_) measure(row);
  auto print = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < row.size() ? row[c] : "";
      const bool left = c == 0 || std::find(left_.begin(), left_.end(), c) != left_.end();
      const std::string pad(width[c] - cell.size(), ' ');
      if (c > 0) line += "  ";
      line += left ? cell + pad : pad + cell;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  print(header_);
  for (const auto& row : rows_) print(row);
}

std::string HumanDuration(double seconds) {
  if (!std::isfinite(seconds)) return "-";
  if (seconds < 60) return absl::StrFormat("%.1fs", seconds);
  const long total = std::lround(seconds);
  if (total < 3600) return absl::StrFormat("%dm %02ds", total / 60, total % 60);
  if (total < 86400) return absl::StrFormat("%dh %02dm", total / 3600, (total % 3600) / 60);
  return absl::StrFormat("%dd %02dh", total / 86400, (total % 86400) / 3600);
}

std::string Dollars(double usd) {
  return std::abs(usd) < 100 ? absl::StrFormat("$%.4f", usd) : absl::StrFormat("$%.2f", usd);
}

std::string JsonString(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string ShortestNumber(double value) {
  // The shortest text that reads back as the same double (as JSON libraries write numbers):
  // 1795.37, not 1795.3700000000001.
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  if (ec != std::errc()) return absl::StrFormat("%.17g", value);
  return std::string(buffer, end);
}

void JsonObject::Key(std::string_view key) {
  if (!body_.empty()) body_ += ",";
  body_ += JsonString(key) + ":";
}

JsonObject& JsonObject::Number(std::string_view key, double value) {
  Key(key);
  body_ += std::isfinite(value) ? ShortestNumber(value) : "null";
  return *this;
}

JsonObject& JsonObject::Integer(std::string_view key, long long value) {
  Key(key);
  body_ += absl::StrCat(value);
  return *this;
}

JsonObject& JsonObject::String(std::string_view key, std::string_view value) {
  Key(key);
  body_ += JsonString(value);
  return *this;
}

JsonObject& JsonObject::Bool(std::string_view key, bool value) {
  Key(key);
  body_ += value ? "true" : "false";
  return *this;
}

JsonObject& JsonObject::Raw(std::string_view key, std::string_view json) {
  Key(key);
  body_.append(json.data(), json.size());
  return *this;
}

namespace {

// About five round tick values covering [lo, hi].
std::vector<double> Ticks(double lo, double hi) {
  const double span = hi - lo > 0 ? hi - lo : 1;
  const double raw = span / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push_back(t);
  }
  return ticks;
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

namespace {

// Where a point's label goes so that it stays inside a canvas `width` wide.
struct LabelPlace {
  double x, y;
  const char* anchor;
};

LabelPlace PlaceLabel(double px, double py, std::string_view label, double width, double top) {
  // About 7 px a character at font-size 12 (sans-serif averages less).
  const double text_width = 7.0 * static_cast<double>(label.size());
  LabelPlace place{px + 9, py - 9, "start"};
  if (place.x + text_width > width - 4) place = {px - 9, py - 9, "end"};
  if (std::string_view(place.anchor) == "end" && place.x - text_width < 4) {
    place = {std::clamp(px, 4 + text_width / 2, width - 4 - text_width / 2), py - 9, "middle"};
  }
  if (place.y < top - 20) place.y = py + 21;
  return place;
}

}  // namespace

std::string SvgChart(const std::vector<ChartPoint>& points, std::string_view title,
                     std::string_view x_label, std::string_view y_label, double marker_x,
                     std::string_view marker_label, std::string_view shade_label) {
  constexpr double kW = 760, kH = 460, kLeft = 80, kRight = 30, kTop = 50, kBottom = 60;
  double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  if (!points.empty()) {
    x_lo = x_hi = points[0].x;
    y_lo = y_hi = points[0].y;
    for (const ChartPoint& p : points) {
      x_lo = std::min(x_lo, p.x);
      x_hi = std::max(x_hi, p.x);
      y_lo = std::min(y_lo, p.y);
      y_hi = std::max(y_hi, p.y);
    }
  }
  if (std::isfinite(marker_x)) {
    x_lo = std::min(x_lo, marker_x);
    x_hi = std::max(x_hi, marker_x);
  }
  const double x_pad = (x_hi - x_lo) * 0.05 + 1e-9, y_pad = (y_hi - y_lo) * 0.08 + 1e-9;
  x_lo = std::max(0.0, x_lo - x_pad);
  x_hi += x_pad;
  y_lo = std::max(0.0, y_lo - y_pad);
  y_hi += y_pad;
  auto sx = [&](double x) { return kLeft + (x - x_lo) / (x_hi - x_lo) * (kW - kLeft - kRight); };
  auto sy = [&](double y) {
    return kH - kBottom - (y - y_lo) / (y_hi - y_lo) * (kH - kTop - kBottom);
  };
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"28\" font-size=\"16\" text-anchor=\"middle\">%s</text>\n",
      kW, kH, kW, kH, kW / 2, XmlEscape(title));
  // Axes, grid and ticks.
  absl::StrAppendFormat(
      &svg,
      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
      kLeft, kH - kBottom, kW - kRight, kH - kBottom, kLeft, kTop, kLeft, kH - kBottom);
  for (double t : Ticks(x_lo, x_hi)) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                          sx(t), kTop, sx(t), kH - kBottom, sx(t), kH - kBottom + 18, t);
  }
  for (double t : Ticks(y_lo, y_hi)) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                          kLeft, sy(t), kW - kRight, sy(t), kLeft - 6, sy(t) + 4, t);
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n"
                        "<text transform=\"translate(20 %.1f) rotate(-90)\" "
                        "text-anchor=\"middle\">%s</text>\n",
                        (kLeft + kW - kRight) / 2, kH - 18, XmlEscape(x_label),
                        (kTop + kH - kBottom) / 2, XmlEscape(y_label));
  if (std::isfinite(marker_x)) {
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" "
        "stroke-dasharray=\"6 4\"/><text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">%s</text>\n",
        sx(marker_x), kTop, sx(marker_x), kH - kBottom,
        sx(marker_x) + 4 + 7.0 * marker_label.size() > kW - 4
            ? sx(marker_x) - 4 - 7.0 * marker_label.size()
            : sx(marker_x) + 4,
        kTop + 14, XmlEscape(marker_label));
  }
  // The frontier as a step line (a plan's cost holds until the next, slower and cheaper one).
  if (points.size() > 1) {
    std::string path = absl::StrFormat("M %.1f %.1f", sx(points[0].x), sy(points[0].y));
    for (size_t i = 1; i < points.size(); ++i) {
      absl::StrAppendFormat(&path, " H %.1f V %.1f", sx(points[i].x), sy(points[i].y));
    }
    absl::StrAppendFormat(&svg, "<path d=\"%s\" fill=\"none\" stroke=\"#4a7bd0\"/>\n", path);
  }
  // A shade in [0, 1] as a hue from red (0) through yellow to green (1).
  auto colour = [](double shade) {
    return absl::StrFormat("hsl(%.0f, 75%%, 42%%)", 120 * std::clamp(shade, 0.0, 1.0));
  };
  bool shaded = false;
  for (const ChartPoint& p : points) {
    const bool has_shade = std::isfinite(p.shade);
    shaded = shaded || has_shade;
    const std::string fill = has_shade ? colour(p.shade) : std::string("#4a7bd0");
    if (p.highlight) {
      // The label right of the point, or left of it (anchored at its end) where it would run
      // past the canvas; below the point near the top edge.
      const LabelPlace place = PlaceLabel(sx(p.x), sy(p.y), p.label, kW, kTop);
      absl::StrAppendFormat(&svg,
                            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"7\" fill=\"%s\" "
                            "stroke=\"#d03030\" stroke-width=\"2.5\"><title>%s</title></circle>"
                            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" "
                            "fill=\"#d03030\">%s</text>\n",
                            sx(p.x), sy(p.y), has_shade ? fill : "#d03030", XmlEscape(p.label),
                            place.x, place.y, place.anchor, XmlEscape(p.label));
    } else {
      absl::StrAppendFormat(&svg,
                            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"><title>%s"
                            "</title></circle>\n",
                            sx(p.x), sy(p.y), has_shade ? "5" : "3.5", fill, XmlEscape(p.label));
    }
  }
  if (shaded) {
    // The legend: the scale from 0 to 1 in ten steps, top right.
    const double x0 = kW - kRight - 200, y0 = kTop + 4;
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", x0, y0 + 10,
                          XmlEscape(shade_label));
    for (int i = 0; i < 10; ++i) {
      absl::StrAppendFormat(&svg,
                            "<rect x=\"%.1f\" y=\"%.1f\" width=\"20\" height=\"10\" "
                            "fill=\"%s\"/>\n",
                            x0 + 20 * i, y0 + 16, colour((i + 0.5) / 10));
    }
    absl::StrAppendFormat(&svg,
                          "<text x=\"%.1f\" y=\"%.1f\">0</text><text x=\"%.1f\" y=\"%.1f\" "
                          "text-anchor=\"end\">1</text>\n",
                          x0, y0 + 40, x0 + 200, y0 + 40);
  }
  return svg + "</svg>\n";
}

std::string Fixed(double value, int decimals) { return absl::StrFormat("%.*f", decimals, value); }

std::string Plural(long long n, std::string_view one, std::string_view many) {
  return absl::StrCat(n, " ", std::string(n == 1 ? one : many));
}

std::string ClusterText(const ::spotdnn::v1::Cluster& cluster) {
  std::vector<std::string> parts;
  for (const ::spotdnn::v1::InstanceCount& c : cluster.instances()) {
    if (c.count() > 0) parts.push_back(absl::StrCat(c.instance_type(), "=", c.count()));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, " ");
}

std::string ClusterJson(const ::spotdnn::v1::Cluster& cluster) {
  JsonObject o;
  for (const ::spotdnn::v1::InstanceCount& c : cluster.instances()) {
    if (c.count() > 0) o.Integer(c.instance_type(), c.count());
  }
  return o.str();
}

std::string LocalBatchText(double local_batch) {
  const double low = std::floor(local_batch);
  if (local_batch == low) return absl::StrFormat("%.0f", low);
  return absl::StrFormat("%.0f-%.0f", low, low + 1);
}

std::string LocalBatchesJson(const ::spotdnn::v1::Prediction& prediction) {
  JsonObject o;
  for (const ::spotdnn::v1::WorkerPrediction& w : prediction.workers()) {
    o.Number(w.instance_type(), w.local_batch());
  }
  return o.str();
}

}  // namespace spotdnn::gateway
