// The short JSON names of the enums a person writes in a profile: SyncKind ("ps", "allreduce")
// and GlobalBatch ("fixed", "scale"), wherever such a field sits in a message. ParseJson and
// ToJson (data_registry.h) apply them: the short names and the proto names are both read, the
// short ones written.
#ifndef SPOTDNN_SERVICES_COMMON_JSON_NAMES_H_
#define SPOTDNN_SERVICES_COMMON_JSON_NAMES_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"

namespace spotdnn::services {

// True when a message of `descriptor` (or one it holds) has a field of a short-named enum.
bool HasShortNamedEnums(const google::protobuf::Descriptor& descriptor);

// `json` (a `descriptor` message) with every short name replaced by its proto name, for
// protobuf's JSON parser; nullopt when nothing needed replacing (or the text is not JSON, which
// the parser then reports). INVALID_ARGUMENT names the field, the value and the accepted names:
// `sync = "ring": not a known value; accepted: ps, allreduce`.
absl::StatusOr<std::optional<std::string>> WithProtoEnumNames(
    absl::string_view json, const google::protobuf::Descriptor& descriptor);

// `json` (protobuf's printing of a `descriptor` message) with the short names written, and a
// field at its unspecified value (0) left out: "sync": "allreduce", no "sync" for the default.
std::string WithShortEnumNames(const std::string& json,
                               const google::protobuf::Descriptor& descriptor, bool pretty);

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_JSON_NAMES_H_
