#pragma once
// Element-wise sums used by the collectives and by transports that reduce while receiving.
#include <cstddef>

#include "comm/group.h"

namespace orchard::comm {

// out[i] = a[i] + b[i] for `count` elements of dtype. out may alias a or b. F16/BF16 are added
// in float and rounded to nearest even.
void sum_into(void* out, const void* a, const void* b, size_t count, DType dtype);

}  // namespace orchard::comm
