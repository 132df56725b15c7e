#include "services/gateway/output.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

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
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
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

std::string Fixed(double value, int decimals) { return absl::StrFormat("%.*f", decimals, value); }

}  // namespace spotdnn::gateway
