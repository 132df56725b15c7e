#include "services/common/request_size.h"

#include <algorithm>
#include <cstdint>

#include "services/common/request_check.h"

namespace spotdnn::services {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// A field's tag and a length prefix each take at most 5 bytes (a varint of 32 bits).
constexpr uint64_t kTagBytes = 5;
constexpr uint64_t kLengthBytes = 5;

uint64_t SaturatingAdd(uint64_t a, uint64_t b, uint64_t cap) { return std::min(a + b, cap); }

uint64_t SaturatingMultiply(uint64_t a, uint64_t b, uint64_t cap) {
  if (a == 0 || b == 0) return 0;
  return a > cap / b ? cap : std::min(a * b, cap);
}

uint64_t MaxBytes(const Descriptor* type, uint64_t cap, int depth,
                  const std::vector<std::string>& unused) {
  if (depth > 32) return cap;
  uint64_t total = 0;
  for (int i = 0; i < type->field_count() && total < cap; ++i) {
    const FieldDescriptor* field = type->field(i);
    if (std::find(unused.begin(), unused.end(), field->full_name()) != unused.end()) continue;
    uint64_t value = 0;  // one value's encoding, without its tag
    switch (field->type()) {
      case FieldDescriptor::TYPE_STRING:
        value = kLengthBytes + StringLimit(field->name());
        break;
      case FieldDescriptor::TYPE_BYTES:
        value = cap;  // bounded by its handler (an import's --max_import_bytes)
        break;
      case FieldDescriptor::TYPE_MESSAGE:
      case FieldDescriptor::TYPE_GROUP:
        value = SaturatingAdd(kLengthBytes, MaxBytes(field->message_type(), cap, depth + 1, unused),
                              cap);
        break;
      case FieldDescriptor::TYPE_DOUBLE:
      case FieldDescriptor::TYPE_FIXED64:
      case FieldDescriptor::TYPE_SFIXED64:
        value = 8;
        break;
      case FieldDescriptor::TYPE_FLOAT:
      case FieldDescriptor::TYPE_FIXED32:
      case FieldDescriptor::TYPE_SFIXED32:
        value = 4;
        break;
      default:  // varints: ints, enums, bool
        value = 10;
        break;
    }
    const uint64_t one = SaturatingAdd(kTagBytes, value, cap);
    const uint64_t field_bytes =
        field->is_repeated() ? SaturatingMultiply(RepeatedLimit(field->name()), one, cap) : one;
    total = SaturatingAdd(total, field_bytes, cap);
  }
  return total;
}

}  // namespace

size_t MaxMessageBytes(const Descriptor* type, size_t cap, const std::vector<std::string>& unused) {
  return std::max(static_cast<size_t>(MaxBytes(type, cap, 0, unused)),
                  std::min(kMinRequestLimit, cap));
}

std::string RequestTooLargeMessage(absl::string_view method, size_t bytes, size_t limit) {
  return absl::StrCat("the request to ", method, " is ", bytes, " bytes: more than the ", limit,
                      " bytes its message can take within the limits on its fields (see "
                      "\"Limits on requests\" in docs/security.md); it was refused unread");
}

}  // namespace spotdnn::services
