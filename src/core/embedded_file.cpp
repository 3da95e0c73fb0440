#include "core/embedded_file.h"

#include <cstdlib>
#include <string>

namespace orchard::core {
namespace {

std::string_view trimmed(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

}  // namespace

AcceptedEncodings accepted_encodings(std::string_view header) {
  AcceptedEncodings accepted;
  for (size_t begin = 0; begin <= header.size();) {
    size_t end = header.find(',', begin);
    if (end == std::string_view::npos) end = header.size();
    const std::string_view item = header.substr(begin, end - begin);
    begin = end + 1;
    const size_t semicolon = item.find(';');
    const std::string_view name = trimmed(item.substr(0, semicolon));
    if (semicolon != std::string_view::npos) {
      const size_t q = item.find("q=", semicolon);
      if (q != std::string_view::npos && std::strtod(std::string(item.substr(q + 2)).c_str(), nullptr) <= 0.0)
        continue;  // refused
    }
    if (name == "br") accepted.brotli = true;
    if (name == "gzip" || name == "x-gzip") accepted.gzip = true;
  }
  return accepted;
}

EncodedBytes encoded_for(const EmbeddedFile& file, std::string_view accept_encoding) {
  const AcceptedEncodings accepted = accepted_encodings(accept_encoding);
  if (accepted.brotli && !file.brotli.empty()) return {file.brotli, "br"};
  if (accepted.gzip && !file.gzip.empty()) return {file.gzip, "gzip"};
  return {file.bytes, ""};
}

}  // namespace orchard::core
