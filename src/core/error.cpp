#include "core/error.h"

namespace orchard {

void throw_invariant(const char* condition, const char* file, int line, const std::string& message) {
  throw InvariantError(fmt::format("[invariant] {} ({}:{}: {})", message, file, line, condition));
}

}  // namespace orchard
