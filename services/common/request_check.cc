#include "services/common/request_check.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/limits.h"
#include "google/protobuf/descriptor.h"
#include "predictor/convergence.h"
#include "services/common/convert.h"
#include "spotdnn/v1/common.pb.h"

namespace spotdnn::services {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Where a field is, as a chain from the request down; the path text is built only for an error.
struct PathStep {
  const PathStep* parent;
  const FieldDescriptor* field;  // nullptr: the prefix
  int index;                     // -1: not a repeated entry
};

std::string PathOf(const PathStep* step, absl::string_view prefix) {
  std::vector<const PathStep*> steps;
  for (; step != nullptr; step = step->parent) steps.push_back(step);
  std::string path(prefix);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const PathStep& s = **it;
    if (s.field != nullptr) absl::StrAppend(&path, path.empty() ? "" : ".", s.field->name());
    if (s.index >= 0) absl::StrAppend(&path, "[", s.index, "]");
  }
  return path;
}

std::string EnumLabels(const google::protobuf::EnumDescriptor& e) {
  std::vector<std::string> labels;
  for (int i = 0; i < e.value_count(); ++i) labels.push_back(EnumLabel(e, e.value(i)->number()));
  return absl::StrJoin(labels, ", ");
}

class Checker {
 public:
  explicit Checker(absl::string_view prefix) : prefix_(prefix) {}

  absl::Status CheckMessage(const google::protobuf::Message& m, const PathStep* at,
                            std::initializer_list<absl::string_view> skip) {
    if (const auto* catalog = dynamic_cast<const v1::InstanceCatalog*>(&m)) {
      if (auto s = CheckCatalogZones(*catalog, PathOf(at, prefix_)); !s.ok()) return s;
    }
    const Reflection* r = m.GetReflection();
    std::vector<const FieldDescriptor*> fields;
    r->ListFields(m, &fields);
    for (const FieldDescriptor* f : fields) {
      bool skipped = false;
      for (absl::string_view name : skip) skipped = skipped || name == f->name();
      if (skipped) continue;
      if (f->is_repeated()) {
        const int n = r->FieldSize(m, f);
        const size_t most = RepeatedLimit(f->name());
        if (static_cast<size_t>(n) > most) {
          const PathStep here{at, f, -1};
          return absl::InvalidArgumentError(
              absl::StrFormat("%s: %d entries, at most %d", PathOf(&here, prefix_), n, most));
        }
        for (int i = 0; i < n; ++i) {
          const PathStep here{at, f, i};
          if (auto s = Value(m, f, i, &here); !s.ok()) return s;
        }
      } else {
        const PathStep here{at, f, -1};
        if (auto s = Value(m, f, -1, &here); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }

 private:
  // One value of `f` (entry `i` of a repeated field, or the field when i < 0).
  absl::Status Value(const google::protobuf::Message& m, const FieldDescriptor* f, int i,
                     const PathStep* at) {
    const Reflection* r = m.GetReflection();
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE:
        return CheckMessage(i < 0 ? r->GetMessage(m, f) : r->GetRepeatedMessage(m, f, i), at, {});
      case FieldDescriptor::CPPTYPE_STRING: {
        if (f->type() == FieldDescriptor::TYPE_BYTES) return absl::OkStatus();
        const std::string& value = i < 0 ? r->GetStringReference(m, f, &scratch_)
                                         : r->GetRepeatedStringReference(m, f, i, &scratch_);
        const size_t limit = StringLimit(f->name());
        if (value.size() > limit) {
          return absl::InvalidArgumentError(limits::LengthError(PathOf(at, prefix_), value, limit));
        }
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_ENUM: {
        const int value = i < 0 ? r->GetEnumValue(m, f) : r->GetRepeatedEnumValue(m, f, i);
        const google::protobuf::EnumDescriptor& e = *f->enum_type();
        if (e.FindValueByNumber(value) == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat(PathOf(at, prefix_), " = ", value,
                                                         ": not a ", e.full_name(),
                                                         " value; expected ", EnumLabels(e)));
        }
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT: {
        const double value = f->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE
                                 ? (i < 0 ? r->GetDouble(m, f) : r->GetRepeatedDouble(m, f, i))
                                 : (i < 0 ? r->GetFloat(m, f) : r->GetRepeatedFloat(m, f, i));
        if (!std::isfinite(value)) {
          return absl::InvalidArgumentError(
              absl::StrFormat("%s = %g: must be a finite number", PathOf(at, prefix_), value));
        }
        return absl::OkStatus();
      }
      default:
        return absl::OkStatus();
    }
  }

  const absl::string_view prefix_;
  std::string scratch_;
};

}  // namespace

size_t StringLimit(absl::string_view field_name) {
  for (absl::string_view text : {"description", "source", "detail", "problem", "reason",
                                 "prices_as_of", "metadata_endpoint", "note", "path", "cluster"}) {
    if (field_name == text) return limits::kMaxTextBytes;
  }
  return limits::kMaxNameBytes;
}

static_assert(limits::kMaxScheduleDrops == predictor::kMaxScheduleDrops);

size_t RepeatedLimit(absl::string_view field_name) {
  if (field_name == "observations") return limits::kMaxLifetimeObservations;
  if (field_name == "convergence") return limits::kMaxConvergenceModels;
  if (field_name == "drop_steps" || field_name == "drop_factors") return limits::kMaxScheduleDrops;
  if (field_name == "metrics") return limits::kMaxMetricsPerSample;
  return limits::kMaxRepeatedEntries;
}

absl::Status CheckCatalogZones(const v1::InstanceCatalog& catalog, absl::string_view field) {
  const std::string at = field.empty() ? std::string() : absl::StrCat(field, ".");
  for (int k = 0; k < catalog.instance_types_size(); ++k) {
    const v1::InstanceType& t = catalog.instance_types(k);
    std::vector<absl::string_view> seen;
    for (int i = 0; i < t.zones_size(); ++i) {
      const v1::InstanceZone& z = t.zones(i);
      const std::string path = absl::StrCat(at, "instance_types[", k, "].zones[", i, "]");
      if (z.name().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ".name is empty (instance type ", t.name(), ")"));
      }
      if (std::find(seen.begin(), seen.end(), z.name()) != seen.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ".name = \"", z.name(), "\": listed twice for instance type ", t.name()));
      }
      seen.push_back(z.name());
      for (auto [name, value] :
           {std::pair{"spot_price_per_hour", z.spot_price_per_hour()},
            std::pair{"on_demand_price_per_hour", z.on_demand_price_per_hour()}}) {
        if (value < 0) {
          return absl::InvalidArgumentError(
              absl::StrFormat("%s.%s = %g (%s in %s): must be >= 0 (0 = the type's)", path, name,
                              value, t.name(), z.name()));
        }
      }
    }
  }
  const v1::ZoneMoves& m = catalog.moves();
  for (auto [name, value] : {std::pair{"changeover_s", m.changeover_s()},
                             std::pair{"transfer_price_per_gib", m.transfer_price_per_gib()},
                             std::pair{"transfer_mb_per_s", m.transfer_mb_per_s()}}) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%smoves.%s = %g: must be >= 0", at, name, value));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRequest(const google::protobuf::Message& message, absl::string_view prefix,
                          std::initializer_list<absl::string_view> skip) {
  Checker checker(prefix);
  return checker.CheckMessage(message, nullptr, skip);
}

}  // namespace spotdnn::services
