#include "detector/hash_ring.h"

#include <algorithm>

namespace spotdnn::detector {

uint64_t StableHash(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  // splitmix64 finalizer: FNV alone clusters short, similar keys.
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

HashRing::HashRing(const std::vector<std::string>& replicas, int virtual_nodes)
    : replicas_(replicas) {
  std::sort(replicas_.begin(), replicas_.end());
  replicas_.erase(std::unique(replicas_.begin(), replicas_.end()), replicas_.end());
  for (const std::string& r : replicas_) {
    for (int v = 0; v < virtual_nodes; ++v) {
      ring_.emplace(StableHash(r + "#" + std::to_string(v)), r);
    }
  }
}

const std::string& HashRing::Owner(std::string_view key) const {
  static const std::string kNone;
  if (ring_.empty()) return kNone;
  auto it = ring_.lower_bound(StableHash(key));
  if (it == ring_.end()) it = ring_.begin();
  return it->second;
}

}  // namespace spotdnn::detector
