// libFuzzer target for the metadata answer parsers: whatever the bytes, no crash, no undefined
// behaviour, and nothing that parses is a malformed notice.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "detector/metadata_parsers.h"

namespace {

void Check(bool condition) {
  if (!condition) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spotdnn::detector;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  if (auto n = ParseAwsInstanceAction(body); n.ok()) {
    Check(n->action == "terminate" || n->action == "stop" || n->action == "hibernate");
    Check(!n->key.empty() && n->kind == EventKind::kNotice);
  }
  if (auto n = ParseAwsRebalance(body); n.ok()) Check(n->kind == EventKind::kRebalance);
  if (auto t = ParseAwsToken(body); t.ok()) Check(!t->empty() && t->size() <= 512);
  (void)ParseGcePreempted(body);
  if (auto m = ParseGceMaintenanceEvent(body); m.ok()) {
    Check(*m == "NONE" || *m == "MIGRATE_ON_HOST_MAINTENANCE" ||
          *m == "TERMINATE_ON_HOST_MAINTENANCE");
  }
  if (auto doc = ParseAzureScheduledEvents(body); doc.ok()) {
    // Every event's notice for the first VM it names, and none for a name no event carries.
    for (const AzureScheduledEvent& e : doc->events) {
      if (e.resources.empty()) continue;
      for (const Notice& n : AzureNotices(*doc, e.resources[0])) {
        Check(n.key.size() > 6 && !n.action.empty());
      }
    }
    Check(AzureNotices(*doc, "").empty());
    (void)AzurePreemptsToAcknowledge(*doc, "vm1");
  }
  if (auto name = ParseAzureComputeName(body); name.ok()) {
    Check(!name->empty() && name->size() <= 128);
  }
  (void)ParseAzureStartRequests(body);
  (void)ParseRfc3339Ms("t", body);
  (void)ParseHttpDateMs("t", body);
  return 0;
}
