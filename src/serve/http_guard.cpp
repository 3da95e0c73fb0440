#include "serve/http_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "serve/openai/schema.h"

namespace orchard::serve::http {
namespace {

using Clock = std::chrono::steady_clock;

#ifdef MSG_NOSIGNAL
constexpr int kSendFlags = MSG_NOSIGNAL;
#else
constexpr int kSendFlags = 0;  // macOS: SO_NOSIGPIPE is set on each accepted socket instead
#endif

int millis_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1000 * 1000));
}

std::string address_of(int fd, bool peer, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  port = 0;
  if ((peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len)) != 0)
    return "";
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    port = ntohs(v6->sin6_port);
  }
  return text;
}

// A short answer written without waiting (the connection is being dropped), then closed.
// `message` says why to the client; the status line's reason phrase when null.
void refuse(int fd, int status, const char* reason, const char* message = nullptr) {
  const std::string body = openai::error_body(openai::api_error(status, message ? message : reason));
  const std::string response = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                               "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n" + body;
  [[maybe_unused]] ssize_t sent = ::send(fd, response.data(), response.size(), kSendFlags | MSG_DONTWAIT);
}

constexpr size_t kNone = std::string::npos;

// Where a request's head ends (just past its blank line), or kNone while it has not all arrived.
size_t head_end_of(const std::string& buffer) {
  const size_t crlf = buffer.find("\r\n\r\n"), lf = buffer.find("\n\n");
  return std::min(crlf == kNone ? kNone : crlf + 4, lf == kNone ? kNone : lf + 2);
}

bool same_text(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool has_text(std::string_view haystack, std::string_view needle) {
  for (size_t i = 0; i + needle.size() <= haystack.size(); ++i)
    if (same_text(haystack.substr(i, needle.size()), needle)) return true;
  return false;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// How a request's body is delimited, read from its head as httplib reads it: chunked when
// Transfer-Encoding says so, else Content-Length bytes, else none.
struct Framing {
  enum Kind { kEmpty, kLength, kChunked, kUnclear } kind = kEmpty;  // kUnclear: httplib refuses it
  size_t length = 0;
  // An HTTP/1.1 `Expect: 100-continue` line, [begin, end) in the head; begin == end when none.
  size_t expect_begin = 0, expect_end = 0;
};

Framing framing_of(std::string_view head) {
  Framing f;
  bool chunked = false, has_length = false, unclear = false;
  size_t at = head.find('\n') + 1;
  const bool http10 = has_text(head.substr(0, at), "HTTP/1.0");
  while (at < head.size()) {
    const size_t eol = head.find('\n', at);
    if (eol == kNone) break;
    const std::string_view line = head.substr(at, eol - at);
    const size_t colon = line.find(':');
    if (colon != kNone) {
      const std::string_view name = trimmed(line.substr(0, colon)), value = trimmed(line.substr(colon + 1));
      if (same_text(name, "Transfer-Encoding")) {
        chunked = chunked || has_text(value, "chunked");
      } else if (same_text(name, "Content-Length")) {
        size_t n = 0;
        bool digits = !value.empty() && value.size() <= 18;
        for (char ch : value) {
          digits = digits && ch >= '0' && ch <= '9';
          n = n * 10 + static_cast<size_t>(ch - '0');
        }
        unclear = unclear || !digits || (has_length && n != f.length);
        has_length = true;
        f.length = n;
      } else if (same_text(name, "Expect") && has_text(value, "100-continue") && !http10) {
        f.expect_begin = at;
        f.expect_end = eol + 1;
      }
    }
    at = eol + 1;
  }
  f.kind = chunked ? Framing::kChunked : unclear ? Framing::kUnclear : has_length && f.length > 0 ? Framing::kLength : Framing::kEmpty;
  return f;
}

enum class Chunks { kMore, kDone, kMalformed };

// Steps over the chunks of a chunked body that have fully arrived, from `at` (the start of a
// chunk's size line), so each byte is looked at about once however slowly they come; kDone when
// the last chunk and its trailers are in, with `at` just past them.
Chunks scan_chunks(const std::string& b, size_t& at) {
  for (;;) {
    const size_t eol = b.find('\n', at);
    if (eol == kNone) return b.size() - at > 1024 ? Chunks::kMalformed : Chunks::kMore;
    size_t size = 0, i = at;
    for (; i < eol && std::isxdigit(static_cast<unsigned char>(b[i])); ++i) {
      if (i - at >= 15) return Chunks::kMalformed;
      const char ch = static_cast<char>(std::tolower(static_cast<unsigned char>(b[i])));
      size = size * 16 + static_cast<size_t>(ch <= '9' ? ch - '0' : ch - 'a' + 10);
    }
    if (i == at) return Chunks::kMalformed;
    if (size == 0) {  // the last chunk: trailer lines up to an empty one
      for (size_t p = eol + 1;;) {
        const size_t e = b.find('\n', p);
        if (e == kNone) return Chunks::kMore;
        if (e == p || (e == p + 1 && b[p] == '\r')) {
          at = e + 1;
          return Chunks::kDone;
        }
        p = e + 1;
      }
    }
    size_t after = eol + 1 + size;
    if (b.size() < after + 2) return Chunks::kMore;
    if (b[after] == '\n') after += 1;
    else if (b[after] == '\r' && b[after + 1] == '\n') after += 2;
    else return Chunks::kMalformed;
    at = after;
  }
}

}  // namespace

// One client connection, between requests in the gate or with a worker for one request.
struct Connection {
  int fd = -1;
  std::string address;
  std::string buffer;  // received, not yet read by httplib (the head, the body, pipelined bytes)
  Clock::time_point idle_deadline, head_deadline;
  size_t served = 0;
  // Once the current request's head is in: where it ends, its body's framing, how far a chunked
  // body has been scanned, and when the body's wait began.
  size_t head_end = 0;  // 0: the head is still coming
  Framing framing;
  size_t chunks_at = 0;
  Clock::time_point body_since;
  // Refused before its body was read: what still comes is read and dropped until head_deadline, so
  // that the client, still sending, reads the answer instead of a reset.
  bool draining = false;
  size_t held = 0;  // bytes counted against the gate's max_buffered_bytes
};

// The stream httplib reads a request from and writes its answer to: the bytes the gate already
// received first, then the socket, with every read bounded by the request's deadline. It defines
// what the Stream interface of each cpp-httplib version asks for, without `override` so that the
// functions one version lacks are plain members.
class GuardedStream final : public httplib::Stream {
 public:
  GuardedStream(Connection& c, Clock::time_point read_deadline, std::chrono::milliseconds write_timeout)
      : c_(c), read_deadline_(read_deadline), write_timeout_(write_timeout), started_(Clock::now()) {}

  bool is_readable() const { return offset_ < c_.buffer.size() || wait(POLLIN, millis_until(read_deadline_)); }
  bool wait_readable() const { return is_readable(); }
  bool wait_writable() const { return is_writable(); }
  bool is_writable() const {
    if (!wait(POLLOUT, static_cast<int>(write_timeout_.count()))) return false;
    // A peer that closed its end shows as readable with nothing to read.
    char byte;
    return !wait(POLLIN, 0) || ::recv(c_.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) != 0;
  }
  ssize_t read(char* ptr, size_t size) {
    if (offset_ < c_.buffer.size()) {
      const size_t n = std::min(size, c_.buffer.size() - offset_);
      std::copy_n(c_.buffer.data() + offset_, n, ptr);
      offset_ += n;
      return static_cast<ssize_t>(n);
    }
    if (!wait(POLLIN, millis_until(read_deadline_))) return -1;  // the request took too long to arrive
    return ::recv(c_.fd, ptr, size, 0);
  }
  ssize_t write(const char* ptr, size_t size) {
    if (!wait(POLLOUT, static_cast<int>(write_timeout_.count()))) return -1;
    return ::send(c_.fd, ptr, size, kSendFlags);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const { ip = address_of(c_.fd, true, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const { ip = address_of(c_.fd, false, port); }
  socket_t socket() const { return c_.fd; }
  time_t duration() const { return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count(); }
  // What httplib did not read (pipelined requests) stays with the connection.
  void keep_unread() { c_.buffer.erase(0, offset_); }

 private:
  bool wait(short events, int timeout_ms) const {
    pollfd p{c_.fd, events, 0};
    return ::poll(&p, 1, timeout_ms) > 0 && (p.revents & (events | POLLHUP | POLLERR)) != 0;
  }

  Connection& c_;
  size_t offset_ = 0;
  Clock::time_point read_deadline_;
  std::chrono::milliseconds write_timeout_;
  Clock::time_point started_;
};

// Connections wait here, polled by one thread, until their request's head has arrived; workers
// then serve that request and hand the connection back.
struct GuardedServer::Gate {
  GuardedServer& server;
  GuardOptions o;
  std::mutex mu;
  std::condition_variable ready_cv;
  std::vector<std::unique_ptr<Connection>> waiting;  // the poll thread's; others append to incoming
  std::vector<std::unique_ptr<Connection>> incoming;
  std::deque<std::unique_ptr<Connection>> ready;
  std::map<std::string, size_t> per_address;
  size_t open = 0;
  size_t buffered = 0;  // the connections' `held` together
  bool running = false;
  int wake[2] = {-1, -1};
  std::thread poller;
  std::vector<std::thread> workers;

  Gate(GuardedServer& s, GuardOptions options) : server(s), o(options) {}

  void start() {
    std::lock_guard lock(mu);
    if (running) return;
    running = true;
    if (::pipe(wake) == 0) {
      ::fcntl(wake[0], F_SETFL, O_NONBLOCK);
      ::fcntl(wake[1], F_SETFL, O_NONBLOCK);
    }
    poller = std::thread([this] { poll_loop(); });
    for (size_t i = 0; i < std::max<size_t>(o.threads, 1); ++i) workers.emplace_back([this] { work(); });
  }

  void stop() {
    {
      std::lock_guard lock(mu);
      if (!running) return;
      running = false;
    }
    poke();
    ready_cv.notify_all();
    poller.join();
    for (auto& w : workers) w.join();
    workers.clear();
    // Every thread has ended: what still waits is closed here.
    for (auto* list : {&waiting, &incoming})
      for (auto& c : *list) forget_locked(*c);
    for (auto& c : ready) forget_locked(*c);
    waiting.clear();
    incoming.clear();
    ready.clear();
    for (int& fd : wake) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  }

  void poke() {
    const char b = 1;
    [[maybe_unused]] ssize_t n = ::write(wake[1], &b, 1);
  }

  // A new socket from httplib's accept loop.
  void admit(int fd) {
#ifdef SO_NOSIGPIPE
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    int port = 0;
    c->address = address_of(fd, true, port);
    std::unique_lock lock(mu);
    auto from = per_address.find(c->address);
    if (!running || open >= o.max_connections || (from != per_address.end() && from->second >= o.max_per_address)) {
      lock.unlock();
      refuse(fd, 503, "Service Unavailable");
      ::shutdown(fd, SHUT_RDWR);
      ::close(fd);
      return;
    }
    ++open;
    ++per_address[c->address];
    wait_again_locked(std::move(c));
  }

  void wait_again_locked(std::unique_ptr<Connection> c) {
    // What is left after a request (pipelined bytes) is counted when judged; the served body is not.
    hold_locked(*c, 0);
    const auto now = Clock::now();
    c->idle_deadline = now + o.idle_timeout;
    c->head_deadline = now + o.head_timeout;
    c->head_end = 0;
    incoming.push_back(std::move(c));
    poke();
  }

  Clock::time_point body_deadline(const Connection& c) const {
    const size_t received = c.buffer.size() - c.head_end;
    return c.body_since + o.body_timeout +
           std::chrono::milliseconds(received * 1000 / std::max<size_t>(o.min_body_rate, 1));
  }

  Clock::time_point deadline(const Connection& c) const {
    if (c.draining) return c.head_deadline;
    if (c.head_end > 0) return body_deadline(c);
    return c.buffer.empty() ? c.idle_deadline : c.head_deadline;
  }

  enum class Next { kWait, kServe, kDrop };

  // Counts `need` bytes as c's against max_buffered_bytes; false, and nothing counted, when all
  // connections together would hold more (less always fits).
  bool hold_locked(Connection& c, size_t need) {
    if (need > c.held && buffered - c.held + need > o.max_buffered_bytes) return false;
    buffered = buffered - c.held + need;
    c.held = need;
    return true;
  }

  // The bytes c's request holds while it arrives: what came, and a body's declared length in full
  // from its head on (reserved then, so that bodies cannot all start and each stop short).
  static size_t need_of(const Connection& c) {
    const size_t declared = c.head_end > 0 && c.framing.kind == Framing::kLength ? c.head_end + c.framing.length : 0;
    return std::max(c.buffer.size(), declared);
  }

  static constexpr const char* kTooMuchBuffered =
      "the server is holding as many request bytes as it may for all its clients together; try again shortly";

  // Whether c's request (head and body) has arrived for a worker, must wait for more, or is
  // refused (answered here); a body is read here so that a slow one holds no handler thread.
  Next judge(Connection& c, Clock::time_point now) {
    if (c.draining) {
      c.buffer.clear();
      hold_locked(c, 0);
      return now >= c.head_deadline ? Next::kDrop : Next::kWait;
    }
    if (c.head_end == 0) {
      const size_t end = head_end_of(c.buffer);
      if (end == kNone) {
        if (c.buffer.size() > o.max_head_bytes) {
          refuse(c.fd, 431, "Request Header Fields Too Large");
          return Next::kDrop;
        }
        if (!hold_locked(c, c.buffer.size())) {
          refuse(c.fd, 503, "Service Unavailable", kTooMuchBuffered);
          return Next::kDrop;
        }
        if (c.buffer.empty() && now >= c.idle_deadline) return Next::kDrop;  // idle keep-alive: closed quietly
        if (!c.buffer.empty() && now >= c.head_deadline) {
          refuse(c.fd, 408, "Request Timeout");
          return Next::kDrop;
        }
        return Next::kWait;
      }
      c.head_end = end;
      c.framing = framing_of(std::string_view(c.buffer).substr(0, end));
      c.chunks_at = end;
      c.body_since = now;
      const bool too_large = c.framing.kind == Framing::kLength && c.framing.length > server.payload_max_length_;
      if (too_large || !hold_locked(c, need_of(c))) {
        if (too_large) refuse(c.fd, 413, "Payload Too Large");
        else refuse(c.fd, 503, "Service Unavailable", kTooMuchBuffered);
        ::shutdown(c.fd, SHUT_WR);
        c.draining = true;
        c.buffer.clear();
        hold_locked(c, 0);
        c.head_deadline = now + o.body_timeout;
        return Next::kWait;
      }
      const Framing& f = c.framing;
      if (f.expect_end > f.expect_begin && f.kind != Framing::kEmpty && c.buffer.size() == end) {
        // The client waits for a go-ahead before its body: give it here, and take the line out so
        // that httplib does not give a second one.
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        [[maybe_unused]] ssize_t sent = ::send(c.fd, kContinue.data(), kContinue.size(), kSendFlags | MSG_DONTWAIT);
        const size_t line = f.expect_end - f.expect_begin;
        c.buffer.erase(f.expect_begin, line);
        c.head_end -= line;
        c.chunks_at -= line;
      }
    }
    if (!hold_locked(c, need_of(c))) {  // a chunked body, or pipelined bytes past a declared one
      refuse(c.fd, 503, "Service Unavailable", kTooMuchBuffered);
      return Next::kDrop;
    }
    const size_t body = c.buffer.size() - c.head_end;
    switch (c.framing.kind) {
      case Framing::kEmpty:
      case Framing::kUnclear:
        return Next::kServe;
      case Framing::kLength:
        if (body >= c.framing.length) return Next::kServe;
        break;
      case Framing::kChunked:
        // Malformed or over the limit: httplib reads it from the buffer and answers 400 or 413.
        if (scan_chunks(c.buffer, c.chunks_at) != Chunks::kMore || body > server.payload_max_length_)
          return Next::kServe;
        break;
    }
    if (now >= body_deadline(c)) {
      refuse(c.fd, 408, "Request Timeout");
      return Next::kDrop;
    }
    return Next::kWait;
  }

  void forget_locked(Connection& c) {
    hold_locked(c, 0);
    --open;
    if (--per_address[c.address] == 0) per_address.erase(c.address);
    ::shutdown(c.fd, SHUT_RDWR);
    ::close(c.fd);
  }

  void poll_loop() {
    std::vector<pollfd> fds;
    for (;;) {
      {
        std::lock_guard lock(mu);
        if (!running) return;
        const auto now = Clock::now();
        for (auto& c : incoming) {
          // Pipelined bytes may hold a whole request already.
          switch (judge(*c, now)) {
            case Next::kServe: ready.push_back(std::move(c)); break;
            case Next::kWait: waiting.push_back(std::move(c)); break;
            case Next::kDrop: forget_locked(*c); break;
          }
        }
        if (!incoming.empty()) ready_cv.notify_all();
        incoming.clear();
      }
      fds.assign(1, pollfd{wake[0], POLLIN, 0});
      Clock::time_point next = Clock::now() + std::chrono::seconds(1);
      for (auto& c : waiting) {
        fds.push_back({c->fd, POLLIN, 0});
        next = std::min(next, deadline(*c));
      }
      ::poll(fds.data(), fds.size(), millis_until(next) + 1);
      if (fds[0].revents & POLLIN) {
        char drain[64];
        while (::read(wake[0], drain, sizeof drain) > 0) {
        }
      }
      const auto now = Clock::now();
      std::lock_guard lock(mu);
      std::vector<std::unique_ptr<Connection>> still;
      for (size_t i = 0; i < waiting.size(); ++i) {
        auto& c = waiting[i];
        bool drop = false;
        if (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) {
          char chunk[16384];
          const ssize_t n = ::recv(c->fd, chunk, sizeof chunk, MSG_DONTWAIT);
          if (n > 0) c->buffer.append(chunk, static_cast<size_t>(n));
          else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) drop = true;
        }
        const Next next_step = drop ? Next::kDrop : judge(*c, now);
        if (next_step == Next::kServe) {
          ready.push_back(std::move(c));
          ready_cv.notify_one();
          continue;
        }
        if (next_step == Next::kDrop) forget_locked(*c);
        else still.push_back(std::move(c));
      }
      waiting = std::move(still);
    }
  }

  void work() {
    for (;;) {
      std::unique_ptr<Connection> c;
      {
        std::unique_lock lock(mu);
        ready_cv.wait(lock, [&] { return !ready.empty() || !running; });
        if (!running) return;
        c = std::move(ready.front());
        ready.pop_front();
      }
      const bool last = ++c->served >= o.requests_per_connection;
      bool closed = false;
      // The body is in the buffer already, except one httplib refuses (a chunked one that is
      // malformed or too large), which it stops reading at once.
      GuardedStream stream(*c, Clock::now() + o.body_timeout, o.write_timeout);
      const bool ok = serve(stream, last, closed);
      stream.keep_unread();
      std::lock_guard lock(mu);
      if (ok && !closed && !last && running) wait_again_locked(std::move(c));
      else forget_locked(*c);
    }
  }

  // httplib's protected entry point for one request; its parameters differ between versions.
  bool serve(GuardedStream& stream, bool close_connection, bool& connection_closed) {
    auto call = [&](auto& s) {
      if constexpr (requires { s.process_request(stream, close_connection, connection_closed, nullptr); }) {
        return s.process_request(stream, close_connection, connection_closed, nullptr);
      } else {
        std::string remote, local;
        int remote_port = 0, local_port = 0;
        stream.get_remote_ip_and_port(remote, remote_port);
        stream.get_local_ip_and_port(local, local_port);
        return s.process_request(stream, remote, remote_port, local, local_port, close_connection, connection_closed,
                                 nullptr);
      }
    };
    return call(server);
  }
};

namespace {

// What enqueue answers: nothing in older cpp-httplib, "taken" (true) in newer ones.
template <typename R>
R accepted() {
  if constexpr (!std::is_void_v<R>) return true;
}

// httplib's accept loop hands each socket to its task queue: this one admits it to the gate at
// once, on the accepting thread, and stops the gate when the server stops.
class GateQueue final : public httplib::TaskQueue {
 public:
  using EnqueueResult = decltype(std::declval<httplib::TaskQueue&>().enqueue(std::function<void()>()));
  explicit GateQueue(std::function<void()> on_shutdown) : on_shutdown_(std::move(on_shutdown)) {}
  EnqueueResult enqueue(std::function<void()> fn) override {
    fn();
    return accepted<EnqueueResult>();
  }
  void shutdown() override { on_shutdown_(); }

 private:
  std::function<void()> on_shutdown_;
};

}  // namespace

GuardedServer::GuardedServer(GuardOptions options) : gate_(std::make_unique<Gate>(*this, options)) {
  // Bodies wait in the gate's memory: httplib's default limit (none in some versions) would let
  // one declared length reserve any amount.
  set_payload_max_length(kDefaultPayloadBytes);
  new_task_queue = [this] {
    // httplib listens with a backlog of 5: a burst of connections (hundreds of slow clients and
    // the real ones among them) would wait a second for each SYN the kernel dropped.
    ::listen(svr_sock_, SOMAXCONN);
    gate_->start();
    return new GateQueue([this] { gate_->stop(); });
  };
  set_socket_options([](socket_t sock) {
    int one = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  });
}

GuardedServer::~GuardedServer() {
  stop();
  gate_->stop();
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  gate_->admit(sock);
  return true;
}

void post(httplib::Server& server, const std::string& pattern, httplib::Server::Handler handler) {
  server.Post(pattern, [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res,
                                                      const httplib::ContentReader& read) {
    if (req.is_multipart_form_data()) {
      res.status = 415;
      res.set_content(openai::error_body(openai::api_error(415, "send the request as JSON, not multipart form data")),
                      "application/json");
      return;
    }
    httplib::Request full = req;  // its path matches still point into req, which outlives the call
    if (!read([&](const char* data, size_t size) {
          full.body.append(data, size);
          return true;
        }))
      return;  // httplib set the status (413 over the payload limit); the error handler writes the body
    handler(full, res);
  });
}

}  // namespace orchard::serve::http
