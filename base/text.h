// Text for people: sizes in bytes with a fitting unit, values quoted in error messages, and the
// lines of a command's output that say why it ended.
#ifndef SPOTDNN_BASE_TEXT_H_
#define SPOTDNN_BASE_TEXT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace spotdnn::base {

// `bytes` in the largest binary unit that keeps the number at least 1: "512 B", "4.0 KiB",
// "120 KiB", "1.5 MiB", "12 GiB" (one decimal below 10, whole numbers from 10).
std::string FormatBytes(uint64_t bytes);

// A value as an error message shows it, in double quotes: `data[2] = "a"`, `count = "x"`. A value
// that is already a quoted literal as it was written (a JSON string, a quoted CSV field) keeps its
// own quotes rather than getting a second pair ("\"a\"" stays "a", not ""a"").
std::string QuotedValue(absl::string_view value);

// Up to `max_lines` of the last lines of a training command's output, oldest first, that say why
// it ended: empty lines, spotdnn-agent's own lines ("[spotdnn-agent]") and SPOTDNN_SAMPLE lines
// left out, and torchrun's report of a failed rank (a traceback and a summary that name no cause)
// cut to its first line, after the rank's own last lines.
std::vector<std::string> TellingLastLines(absl::string_view output, int max_lines);

}  // namespace spotdnn::base

#endif  // SPOTDNN_BASE_TEXT_H_
