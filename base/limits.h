// The documented limits on what a spotdnn request may carry, and the text helpers every error
// that echoes a caller's value uses. Header-only and free of gRPC, so that domain libraries check
// the same limits (defence in depth) as the service edge (services/common/request_check.h).
#ifndef SPOTDNN_BASE_LIMITS_H_
#define SPOTDNN_BASE_LIMITS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace spotdnn::limits {

// Names, ids and keys (job_id, worker_id, instance_type, notice_key, a catalog's name, ...): at
// most this many bytes of UTF-8.
inline constexpr size_t kMaxNameBytes = 256;
// Free text (description, source, detail, problem, reason, prices_as_of), URLs
// (metadata_endpoint), file paths (an import's path) and cluster compositions (a sample's or an
// import's "TYPE=N,TYPE=N").
inline constexpr size_t kMaxTextBytes = 1024;
// Entries of one repeated field of a request (a catalog's instance types, job_ids, ...), unless a
// larger limit is documented for the field (PredictBatch.clusters).
inline constexpr size_t kMaxRepeatedEntries = 10'000;
// Entries of the lifetime observations of one instance type or lifetime group
// (InstanceLifetimes.observations, LifetimeGroup.observations): revocation models are fitted to
// many of them.
inline constexpr size_t kMaxLifetimeObservations = 100'000;
// How much of a refused value an error message quotes.
inline constexpr size_t kMaxQuotedBytes = 48;
// Longest status message a service answers (longer ones are cut): gRPC carries it in a header,
// and clients refuse headers above 8 KiB.
inline constexpr size_t kMaxStatusMessageBytes = 2048;

// Most convergence models one workload profile may hold (one per metric), most step drops in a
// learning-rate schedule (predictor::kMaxScheduleDrops), most metrics one sample may carry.
inline constexpr size_t kMaxConvergenceModels = 64;
inline constexpr size_t kMaxScheduleDrops = 64;
inline constexpr size_t kMaxMetricsPerSample = 64;

// A metric's name (a target's "accuracy", a sample's "metric.top5"): 1 to kMaxMetricNameBytes
// letters, digits and "_.-/:" (a TensorBoard tag such as "eval/top5" included).
inline constexpr size_t kMaxMetricNameBytes = 128;
inline bool IsMetricName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxMetricNameBytes) return false;
  for (char c : name) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!(alnum || c == '_' || c == '.' || c == '-' || c == '/' || c == ':')) return false;
  }
  return true;
}

// `text` as valid UTF-8 of at most `max_bytes` bytes: invalid sequences become U+FFFD, and a cut
// (at a character boundary) ends in "…" within the limit.
inline std::string ValidUtf8(absl::string_view text, size_t max_bytes = SIZE_MAX) {
  constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";
  constexpr absl::string_view kEllipsis = "\xE2\x80\xA6";
  std::string out;
  out.reserve(text.size() < max_bytes ? text.size() : max_bytes);
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    size_t len = 0;
    const unsigned char c = s[i];
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
    }
    bool valid = len > 0 && i + len <= n;
    for (size_t k = 1; valid && k < len; ++k) valid = (s[i + k] & 0xC0) == 0x80;
    if (valid && len == 3) {
      // No overlong forms and no UTF-16 surrogates.
      valid = !(c == 0xE0 && s[i + 1] < 0xA0) && !(c == 0xED && s[i + 1] >= 0xA0);
    } else if (valid && len == 4) {
      valid = !(c == 0xF0 && s[i + 1] < 0x90) && !(c == 0xF4 && s[i + 1] >= 0x90);
    }
    const size_t advance = valid ? len : 1;
    const absl::string_view piece = valid ? absl::string_view(text.data() + i, len) : kReplacement;
    if (out.size() + piece.size() > max_bytes) {
      // Cut: drop whole characters until the ellipsis fits.
      while (!out.empty() && out.size() + kEllipsis.size() > max_bytes) {
        unsigned char last = 0;
        do {
          last = static_cast<unsigned char>(out.back());
          out.pop_back();
        } while (!out.empty() && (last & 0xC0) == 0x80);
      }
      if (out.size() + kEllipsis.size() <= max_bytes)
        out.append(kEllipsis.data(), kEllipsis.size());
      return out;
    }
    out.append(piece.data(), piece.size());
    i += advance;
  }
  return out;
}

// Whether `text` is valid UTF-8 (no overlong forms, no UTF-16 surrogates), as protobuf requires
// of a string field.
inline bool IsValidUtf8(absl::string_view text) { return ValidUtf8(text) == text; }

// A caller's value for an error message: in double quotes, valid UTF-8, at most kMaxQuotedBytes
// of it; a longer value is cut and its length given ("abc…" (8000 bytes)).
inline std::string Quote(absl::string_view value) {
  std::string quoted = absl::StrCat("\"", ValidUtf8(value, kMaxQuotedBytes), "\"");
  if (value.size() > kMaxQuotedBytes) absl::StrAppend(&quoted, " (", value.size(), " bytes)");
  return quoted;
}

// `key` when it is at most kMaxNameBytes; otherwise its first bytes and a hash of the whole, so
// that a long identifier from elsewhere (a metadata service's event id) stays distinct and within
// the limit. The same key gives the same result in every process (libstdc++'s string hash).
inline std::string BoundedKey(const std::string& key) {
  if (key.size() <= kMaxNameBytes) return key;
  return absl::StrCat(ValidUtf8(key, kMaxNameBytes - 20), "#",
                      absl::Hex(std::hash<std::string>{}(key), absl::kZeroPad16));
}

// INVALID_ARGUMENT-style text for a string field over its limit, or "" when within it:
// "job_id = "abc…" (300 bytes): longer than 256 bytes".
inline std::string LengthError(absl::string_view field, absl::string_view value, size_t limit) {
  if (value.size() <= limit) return "";
  return absl::StrCat(field, " = ", Quote(value), ": longer than ", limit, " bytes");
}

}  // namespace spotdnn::limits

#endif  // SPOTDNN_BASE_LIMITS_H_
