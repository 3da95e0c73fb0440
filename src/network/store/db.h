#pragma once
// The smallest SQL surface the store needs, with one implementation per database: SQLite
// (embedded, WAL) and PostgreSQL. SQL is written once: parameters are $1, $2, ... in both, and
// the schema uses types both accept (BIGINT, DOUBLE PRECISION, TEXT).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace orchard::network {

using Value = std::variant<std::nullptr_t, int64_t, double, std::string>;

struct Row {
  std::vector<Value> cols;
  bool is_null(size_t i) const { return std::holds_alternative<std::nullptr_t>(cols.at(i)); }
  int64_t i64(size_t i) const;        // NULL reads as 0
  double f64(size_t i) const;         // NULL reads as 0
  std::string str(size_t i) const;    // NULL reads as ""
};

// One connection. Not thread-safe: the Store serializes access.
class Db {
 public:
  virtual ~Db() = default;
  // Runs one statement; returns the rows it changed. Throws Error "[network] ..." with the
  // database's message.
  virtual int64_t exec(std::string_view sql, const std::vector<Value>& params = {}) = 0;
  virtual std::vector<Row> query(std::string_view sql, const std::vector<Value>& params = {}) = 0;
  // Starts a write transaction (SQLite: BEGIN IMMEDIATE, so the write lock is taken up front).
  virtual void begin() = 0;
  virtual void commit() = 0;
  virtual void rollback() noexcept = 0;
  virtual std::string_view backend() const = 0;  // "sqlite" | "postgres"
};

// url: "sqlite://PATH", a plain PATH (SQLite), ":memory:", or "postgresql://..." /
// "postgres://...". Throws Error when the database cannot be opened, or when PostgreSQL was
// asked for in a build without it.
std::unique_ptr<Db> open_db(const std::string& url);

std::unique_ptr<Db> open_sqlite(const std::string& path);
std::unique_ptr<Db> open_postgres(const std::string& url);
bool postgres_available();  // false in a build without libpq (link-time choice)

// A PostgreSQL session of its own, for what lasts as long as a session: an advisory lock (the
// coordinators' leadership) and LISTEN (their notices to each other). Not thread-safe.
class Listener {
 public:
  virtual ~Listener() = default;
  // Takes the session-level advisory lock `key` if no other session holds it; held until this
  // session ends (when its process dies, the server releases it).
  virtual bool try_lock(int64_t key) = 0;
  // Payloads notified on the channel since the last call, waiting up to `timeout` for the first.
  // Throws Error "[network] ..." when the session is lost.
  virtual std::vector<std::string> wait(std::chrono::milliseconds timeout) = 0;
};
std::unique_ptr<Listener> open_listener(const std::string& url, const std::string& channel);

// An exclusive lock on a file (flock: released when the holder closes it or dies), which a
// coordinator on SQLite holds on "PATH.coordinator" so that a second one on the same database is
// refused instead of splitting the work. Throws Error naming the file when another holds it.
class FileLock {
 public:
  explicit FileLock(const std::string& path);
  FileLock(const FileLock&) = delete;
  ~FileLock();

 private:
  int fd_ = -1;
};

// The file a SQLite URL names ("" for ":memory:" and PostgreSQL URLs).
std::string sqlite_path(const std::string& url);

}  // namespace orchard::network
