// The edge check every spotdnn handler runs on a request before any domain code sees it: the
// limits of base/limits.h on strings and repeated fields, enum values the enum
// defines, and finite floating-point numbers. Field-specific bounds (counts, quotas, sizes) are
// the domain's.
#ifndef SPOTDNN_SERVICES_COMMON_REQUEST_CHECK_H_
#define SPOTDNN_SERVICES_COMMON_REQUEST_CHECK_H_

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "spotdnn/v1/common.pb.h"

namespace spotdnn::services {

// The limit on a string field called `field_name`: limits::kMaxTextBytes for free text
// (description, source, detail, problem, reason, prices_as_of, note), URLs (metadata_endpoint),
// file paths (path) and cluster compositions ("TYPE=N,TYPE=N": cluster); limits::kMaxNameBytes
// for every other string (names, ids, keys).
size_t StringLimit(absl::string_view field_name);

// The most entries of a repeated field called `field_name`: limits::kMaxLifetimeObservations for
// a type's or a group's lifetime observations ("observations"), kMaxConvergenceModels for a
// profile's "convergence", kMaxScheduleDrops for a schedule's "drop_steps" and "drop_factors",
// kMaxMetricsPerSample for a sample's "metrics", limits::kMaxRepeatedEntries for every other.
size_t RepeatedLimit(absl::string_view field_name);

// OK when the zones of `catalog` (at `field`, e.g. "catalog.catalog") are usable: each named, once
// per type, with prices >= 0, and its moves' numbers >= 0; otherwise INVALID_ARGUMENT naming the
// field ("catalog.catalog.instance_types[2].zones[1].name") and value. CheckRequest runs it on
// every catalog in a request; the data registry on every catalog it loads.
absl::Status CheckCatalogZones(const v1::InstanceCatalog& catalog, absl::string_view field = "");

// OK when every field set in `message` is within the limits: strings within StringLimit (bytes
// fields are the handler's), enums one of the values their enum defines, doubles and floats
// finite, repeated fields with at most RepeatedLimit entries, catalogs' zones as CheckCatalogZones
// says. Otherwise
// INVALID_ARGUMENT naming the field by its path from `message` ("options.strategy",
// "catalog.catalog.instance_types[3].name"), after `prefix` when given ("reports[7].job_id"),
// quoting at most a short prefix of a string. Top-level fields named in `skip` are not checked
// (a handler that bounds them itself, e.g. PredictBatch's clusters).
absl::Status CheckRequest(const google::protobuf::Message& message, absl::string_view prefix = "",
                          std::initializer_list<absl::string_view> skip = {});

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_REQUEST_CHECK_H_
