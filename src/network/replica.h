#pragma once
// One of several coordinator processes on one PostgreSQL database. Each listens on the
// database's notice channel and tries, every second, to take the leader lock (a session advisory
// lock, released by the server when the session ends). The replica holding it places jobs, keeps
// the nodes' inboxes and serves nodes; the others take clients' jobs (a row and a notice each)
// and send nodes to the leader. A leader whose session is lost can no longer know it leads: it
// stops (on_lost), and another replica takes the lock within a second and loads the queue and
// the leases from the database, as after a restart. The coordinator's notices to the others go
// out in batches, every kFlushMs: PostgreSQL serializes the commits of notifying statements, so
// one a submission would cap the followers' submissions at one a disk flush.
#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "network/coordinator.h"

namespace orchard::network {

class Replica {
 public:
  // url: the PostgreSQL database the coordinator's store is on. advertise: where this replica
  // serves nodes when it leads ("http://HOST:PORT"). on_lost: called, from the replica's thread,
  // with the reason, when this replica led and lost its session.
  Replica(Coordinator& coordinator, std::string url, std::string advertise,
          std::function<void(const std::string&)> on_lost);
  ~Replica();
  // Ends the session (a leader's lock goes to the next replica) and the thread.
  void stop();

 private:
  void run();
  void flush();  // sends the coordinator's notices until stopped
  Coordinator& coordinator_;
  std::string url_, advertise_;
  std::function<void(const std::string&)> on_lost_;
  std::atomic<bool> stop_{false};
  std::thread thread_, flusher_;
};

}  // namespace orchard::network
