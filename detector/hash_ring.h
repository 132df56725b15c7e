// Consistent hashing of instance ids over detector replicas: each replica owns the instances
// whose hash falls on its arcs, and a replica's failure moves only its own instances.
#ifndef SPOTDNN_DETECTOR_HASH_RING_H_
#define SPOTDNN_DETECTOR_HASH_RING_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace spotdnn::detector {

// A ring of replicas with `virtual_nodes` points each. Empty ring: Owner() returns "".
class HashRing {
 public:
  explicit HashRing(const std::vector<std::string>& replicas = {}, int virtual_nodes = 128);
  // The replica that owns `key`.
  const std::string& Owner(std::string_view key) const;
  // The replicas on the ring, sorted.
  const std::vector<std::string>& replicas() const { return replicas_; }
  bool empty() const { return ring_.empty(); }

 private:
  std::vector<std::string> replicas_;
  std::map<uint64_t, std::string> ring_;
};

// A stable 64-bit hash (FNV-1a with a final mix), the same on every replica and build.
uint64_t StableHash(std::string_view text);

}  // namespace spotdnn::detector

#endif  // SPOTDNN_DETECTOR_HASH_RING_H_
