#include "services/common/json_names.h"

#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace spotdnn::services {
namespace {

using Json = nlohmann::ordered_json;
using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;

// An enum's short names, by proto value name; its value 0 (unspecified) has none.
struct ShortNamed {
  const char* full_name;
  std::vector<std::pair<std::string, std::string>> names;  // (proto name, short name)
};

const std::vector<ShortNamed>& ShortNamedEnums() {
  static const auto* table = new std::vector<ShortNamed>{
      {"spotdnn.v1.SyncKind", {{"SYNC_KIND_PS", "ps"}, {"SYNC_KIND_ALLREDUCE", "allreduce"}}},
      {"spotdnn.v1.GlobalBatch",
       {{"GLOBAL_BATCH_FIXED", "fixed"}, {"GLOBAL_BATCH_SCALE", "scale"}}},
  };
  return *table;
}

const ShortNamed* ShortNamesOf(const EnumDescriptor* e) {
  if (e == nullptr) return nullptr;
  for (const ShortNamed& s : ShortNamedEnums()) {
    if (e->full_name() == s.full_name) return &s;
  }
  return nullptr;
}

bool Compute(const Descriptor& d, std::map<const Descriptor*, bool>& memo) {
  if (auto it = memo.find(&d); it != memo.end()) return it->second;
  memo[&d] = false;  // a message that holds itself (google.protobuf.Value) ends here
  for (int i = 0; i < d.field_count(); ++i) {
    if (ShortNamesOf(d.field(i)->enum_type()) != nullptr) return memo[&d] = true;
  }
  for (int i = 0; i < d.field_count(); ++i) {
    const Descriptor* m = d.field(i)->message_type();
    if (m != nullptr && Compute(*m, memo)) return memo[&d] = true;
  }
  return false;
}

// The JSON key `field` has in `object` (its proto name or its lowerCamelCase name), or nullptr.
Json* Member(Json& object, const FieldDescriptor& field) {
  for (const std::string& key : {field.name(), field.json_name()}) {
    if (auto it = object.find(key); it != object.end()) return &*it;
  }
  return nullptr;
}

std::string KeyOf(const Json& object, const FieldDescriptor& field) {
  return object.contains(field.name()) ? field.name() : field.json_name();
}

// Each value of a field (the array's elements for a repeated one) with its path.
template <typename Visit>
void ForEachValue(Json& value, const FieldDescriptor& field, const std::string& path,
                  Visit&& visit) {
  if (field.is_map()) {
    if (!value.is_object()) return;
    for (auto& [key, v] : value.items()) visit(v, absl::StrCat(path, "[", key, "]"));
  } else if (field.is_repeated()) {
    if (!value.is_array()) return;
    for (size_t i = 0; i < value.size(); ++i) visit(value[i], absl::StrCat(path, "[", i, "]"));
  } else {
    visit(value, path);
  }
}

absl::Status Expand(const Descriptor& d, Json& object, const std::string& prefix, bool& changed) {
  if (!object.is_object()) return absl::OkStatus();
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor& f = *d.field(i);
    Json* value = Member(object, f);
    if (value == nullptr) continue;
    const std::string path = absl::StrCat(prefix, KeyOf(object, f));
    const FieldDescriptor* element = f.is_map() ? f.message_type()->map_value() : &f;
    absl::Status status;
    if (const ShortNamed* names = ShortNamesOf(element->enum_type()); names != nullptr) {
      ForEachValue(*value, f, path, [&](Json& v, const std::string& at) {
        if (!status.ok() || !v.is_string()) return;  // a number or null: protobuf's to judge
        const std::string text = v.get<std::string>();
        for (const auto& [proto, short_name] : names->names) {
          if (text == short_name) {
            v = proto;
            changed = true;
            return;
          }
        }
        if (element->enum_type()->FindValueByName(text) != nullptr) return;
        std::vector<std::string> accepted;
        for (const auto& [proto, short_name] : names->names) accepted.push_back(short_name);
        status = absl::InvalidArgumentError(absl::StrCat(
            at, " = \"", text, "\": not a known value; accepted: ", absl::StrJoin(accepted, ", ")));
      });
    } else if (const Descriptor* m = element->message_type();
               m != nullptr && HasShortNamedEnums(*m)) {
      ForEachValue(*value, f, path, [&](Json& v, const std::string& at) {
        if (status.ok()) status = Expand(*m, v, absl::StrCat(at, "."), changed);
      });
    }
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

void Shorten(const Descriptor& d, Json& object) {
  if (!object.is_object()) return;
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor& f = *d.field(i);
    Json* value = Member(object, f);
    if (value == nullptr) continue;
    const FieldDescriptor* element = f.is_map() ? f.message_type()->map_value() : &f;
    if (const ShortNamed* names = ShortNamesOf(element->enum_type()); names != nullptr) {
      const std::string unspecified = element->enum_type()->value(0)->name();
      if (!f.is_repeated() && value->is_string() && value->get<std::string>() == unspecified) {
        object.erase(KeyOf(object, f));
        continue;
      }
      ForEachValue(*value, f, "", [&](Json& v, const std::string&) {
        if (!v.is_string()) return;
        for (const auto& [proto, short_name] : names->names) {
          if (v.get<std::string>() == proto) v = short_name;
        }
      });
    } else if (const Descriptor* m = element->message_type();
               m != nullptr && HasShortNamedEnums(*m)) {
      ForEachValue(*value, f, "", [&](Json& v, const std::string&) { Shorten(*m, v); });
    }
  }
}

}  // namespace

bool HasShortNamedEnums(const Descriptor& descriptor) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* memo = new std::map<const Descriptor*, bool>();
  absl::MutexLock lock(&mu);
  return Compute(descriptor, *memo);
}

absl::StatusOr<std::optional<std::string>> WithProtoEnumNames(absl::string_view json,
                                                              const Descriptor& descriptor) {
  if (!HasShortNamedEnums(descriptor)) return std::optional<std::string>();
  Json doc = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return std::optional<std::string>();
  bool changed = false;
  if (auto s = Expand(descriptor, doc, "", changed); !s.ok()) return s;
  if (!changed) return std::optional<std::string>();
  return std::optional<std::string>(doc.dump(-1, ' ', false, Json::error_handler_t::replace));
}

std::string WithShortEnumNames(const std::string& json, const Descriptor& descriptor, bool pretty) {
  if (!HasShortNamedEnums(descriptor)) return json;
  Json doc = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return json;
  Shorten(descriptor, doc);
  return doc.dump(pretty ? 2 : -1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace spotdnn::services
