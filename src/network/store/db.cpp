#include "network/store/db.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "core/error.h"

namespace orchard::network {

int64_t Row::i64(size_t i) const {
  const Value& v = cols.at(i);
  if (auto p = std::get_if<int64_t>(&v)) return *p;
  if (auto p = std::get_if<double>(&v)) return static_cast<int64_t>(*p);
  if (auto p = std::get_if<std::string>(&v)) return p->empty() ? 0 : std::stoll(*p);
  return 0;
}

double Row::f64(size_t i) const {
  const Value& v = cols.at(i);
  if (auto p = std::get_if<double>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v)) return static_cast<double>(*p);
  if (auto p = std::get_if<std::string>(&v)) return p->empty() ? 0 : std::stod(*p);
  return 0;
}

std::string Row::str(size_t i) const {
  const Value& v = cols.at(i);
  if (auto p = std::get_if<std::string>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v)) return std::to_string(*p);
  if (auto p = std::get_if<double>(&v)) return fmt::format("{}", *p);
  return {};
}

std::string sqlite_path(const std::string& url) {
  if (url.starts_with("postgresql://") || url.starts_with("postgres://")) return "";
  std::string path = url.starts_with("sqlite://") ? url.substr(9) : url;
  return path == ":memory:" ? "" : path;
}

FileLock::FileLock(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) throw Error(error_message("network", "cannot open lock file '{}': {}", path, std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    if (err == EWOULDBLOCK)
      throw Error(error_message("network",
                                "another coordinator already runs on this SQLite database (it holds '{}'): SQLite "
                                "serves one coordinator process; to run several, share a PostgreSQL database",
                                path));
    throw Error(error_message("network", "cannot lock '{}': {}", path, std::strerror(err)));
  }
}

FileLock::~FileLock() { ::close(fd_); }

std::unique_ptr<Db> open_db(const std::string& url) {
  if (url.starts_with("postgresql://") || url.starts_with("postgres://")) return open_postgres(url);
  if (url.starts_with("sqlite://")) return open_sqlite(url.substr(9));
  if (url.find("://") != std::string::npos)
    throw Error(error_message("network", "unknown database URL '{}' (sqlite://PATH or postgresql://...)", url));
  return open_sqlite(url);
}

}  // namespace orchard::network
