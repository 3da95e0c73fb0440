#include "model/shard.h"

#include <array>
#include <bit>

#include "core/error.h"

namespace orchard::model {

void assign_experts(const Shard& shard, int32_t layer, std::span<const int32_t> chosen, int32_t used,
                    std::span<int32_t> members) {
  ORCHARD_CHECK(members.size() == chosen.size() && used > 0 && chosen.size() % static_cast<size_t>(used) == 0,
                "{} members for {} choices of {} per row", members.size(), chosen.size(), used);
  const std::vector<uint64_t>& holders = shard.expert_holders.at(static_cast<size_t>(layer));
  std::array<int64_t, 64> load{};
  int group = 1;
  for (uint64_t mask : holders) group = std::max(group, 64 - std::countl_zero(mask));
  // Single holders first, so that a replica goes where the fixed choices left room.
  for (size_t i = 0; i < chosen.size(); ++i) {
    const uint64_t mask = holders.at(static_cast<size_t>(chosen[i]));
    ORCHARD_CHECK(mask != 0, "expert {} of layer {} has no holder", chosen[i], layer);
    if (std::has_single_bit(mask)) {
      members[i] = std::countr_zero(mask);
      ++load[static_cast<size_t>(members[i])];
    } else {
      members[i] = -1;
    }
  }
  // Ties go round the group from a member that changes with the layer, so that no member
  // takes every tie of a decode step's every layer.
  const int first = layer % group;
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (members[i] >= 0) continue;
    const uint64_t mask = holders[static_cast<size_t>(chosen[i])];
    int best = -1;
    for (int k = 0; k < group; ++k) {
      const int m = (first + k) % group;
      if (((mask >> m) & 1u) && (best < 0 || load[static_cast<size_t>(m)] < load[static_cast<size_t>(best)])) best = m;
    }
    members[i] = best;
    ++load[static_cast<size_t>(best)];
  }
}

}  // namespace orchard::model
