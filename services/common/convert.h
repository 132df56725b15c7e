// Conversions between spotdnn.v1 messages and the domain types, done once at the service edge.
#ifndef SPOTDNN_SERVICES_COMMON_CONVERT_H_
#define SPOTDNN_SERVICES_COMMON_CONVERT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/generated_enum_reflection.h"
#include "grpcpp/support/status.h"
#include "predictor/performance_model.h"
#include "predictor/types.h"
#include "spotdnn/v1/common.pb.h"

namespace spotdnn::services {

namespace pb = ::spotdnn::v1;

predictor::InstanceCatalog ToDomain(const pb::InstanceCatalog& catalog);
predictor::WorkloadProfile ToDomain(const pb::WorkloadProfile& profile);
pb::WorkloadProfile ToProto(const predictor::WorkloadProfile& profile);
// Validates names and counts against the catalog (INVALID_ARGUMENT naming `field`'s entry).
absl::StatusOr<predictor::Cluster> ToDomain(const pb::Cluster& cluster,
                                            const predictor::InstanceCatalog& catalog,
                                            absl::string_view field = "cluster");

pb::Cluster ToProto(const predictor::Cluster& cluster, const predictor::InstanceCatalog& catalog);
// The cluster-level numbers of an estimate (no per-type breakdown).
void EstimateToProto(const predictor::Estimate& estimate, pb::Prediction* out);
pb::Prediction ToProto(const predictor::Prediction& prediction,
                       const predictor::InstanceCatalog& catalog);

// The variant of a profile message, and back.
predictor::ModelVariant ToDomain(pb::ModelVariant variant);
pb::ModelVariant ToProto(predictor::ModelVariant variant);

// The training target a request states: target_loss, or target_iterations, or target_epochs
// passes over dataset_size samples. `prefix` is prepended to the field names in errors ("slo.").
// target_loss 0 with neither of the others is a loss target of 0 (refused later as below the
// floor, as before). INVALID_ARGUMENT names the field: two targets, iterations not a whole number
// in [1, kMaxTargetIterations], epochs not in (0, kMaxTargetEpochs], dataset_size missing with
// epochs, given without them or above kMaxDatasetSize (predictor/types.h).
absl::StatusOr<predictor::Target> TargetOf(double target_loss, double target_iterations,
                                           double target_epochs, double dataset_size,
                                           absl::string_view prefix = "");
// The same with a metric target (`metric` null when the request has none): a kMetric target, or
// a loss target for "loss" at most L. INVALID_ARGUMENT names the field: two targets, an empty or
// over-long metric name, an unspecified direction, a value that is not finite, a loss at least
// L, an accuracy at most A or outside (0, 1].
absl::StatusOr<predictor::Target> TargetOf(double target_loss, double target_iterations,
                                           double target_epochs, double dataset_size,
                                           const pb::MetricTarget* metric,
                                           absl::string_view prefix = "");
// The target of a message with the fields target_loss, target_iterations, target_epochs,
// dataset_size and target_metric (PredictRequest, PredictBatchRequest, LossCurveRequest, Slo).
template <typename M>
absl::StatusOr<predictor::Target> TargetOfMessage(const M& m, absl::string_view prefix = "") {
  return TargetOf(m.target_loss(), m.target_iterations(), m.target_epochs(), m.dataset_size(),
                  m.has_target_metric() ? &m.target_metric() : nullptr, prefix);
}
// "METRIC>=VALUE" or "METRIC<=VALUE" (spaces around the parts allowed): a metric target, "loss"
// included. INVALID_ARGUMENT naming `field` and the text: no >= or <=, a name not of 1 to 128
// letters, digits and "_.-/:", a value that is not a finite number, a loss at least L, an
// accuracy at most A or outside (0, 1].
absl::StatusOr<pb::MetricTarget> ParseMetricTarget(absl::string_view field, absl::string_view text);
// A metric target as a message (kLoss: "loss" at most; other kinds: an empty message).
pb::MetricTarget MetricTargetOf(const predictor::Target& target);
// Writes the target into a prediction (target_loss, or target_iterations, or target_epochs and
// dataset_size).
void SetTarget(double target_loss, double target_iterations, double target_epochs,
               double dataset_size, pb::Prediction* out);
// The same for a message with the target fields (see TargetOfMessage), target_metric included.
template <typename M>
void SetTargetOf(const M& m, pb::Prediction* out) {
  SetTarget(m.target_loss(), m.target_iterations(), m.target_epochs(), m.dataset_size(), out);
  if (m.has_target_metric()) {
    *out->mutable_target_metric() = m.target_metric();
    if (m.target_metric().metric() == "loss") out->set_target_loss(m.target_metric().value());
  } else {
    out->clear_target_metric();
  }
}

// A convergence model and a learning-rate schedule, and back (every field).
predictor::ConvergenceModel ToDomain(const pb::ConvergenceModel& model);
pb::ConvergenceModel ToProto(const predictor::ConvergenceModel& model);
predictor::LrSchedule ToDomain(const pb::LrSchedule& schedule);
pb::LrSchedule ToProto(const predictor::LrSchedule& schedule);

// absl::Status -> grpc::Status with the same code and message; the message made valid UTF-8 and
// cut to limits::kMaxStatusMessageBytes (gRPC carries it in a header clients bound).
grpc::Status ToGrpc(const absl::Status& status);
// grpc::Status -> absl::Status with the same code and message.
absl::Status FromGrpc(const grpc::Status& status);

// The label of a protobuf enum value, as the CLI, logs and job files show it: its name without the
// prefix all the enum's values share, lower case, '_' as '-' ("spotdnn-prototype" for
// MODEL_VARIANT_SPOTDNN_PROTOTYPE, "notice" for RevocationEvent::KIND_NOTICE). A number the enum
// does not define (a newer peer's) is "unknown-N".
std::string EnumLabel(const google::protobuf::EnumDescriptor& descriptor, int value);
template <typename E>
std::string EnumLabel(E value) {
  return EnumLabel(*google::protobuf::GetEnumDescriptor<E>(), static_cast<int>(value));
}

// The value with that label (see EnumLabel; case-insensitive, '_' or '-'). INVALID_ARGUMENT naming
// `field`, the text and the labels it accepts.
absl::StatusOr<int> ParseEnumLabel(const google::protobuf::EnumDescriptor& descriptor,
                                   absl::string_view field, absl::string_view label);
template <typename E>
absl::StatusOr<E> ParseEnumLabel(absl::string_view field, absl::string_view label) {
  absl::StatusOr<int> value =
      ParseEnumLabel(*google::protobuf::GetEnumDescriptor<E>(), field, label);
  if (!value.ok()) return value.status();
  return static_cast<E>(*value);
}

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_CONVERT_H_
