#pragma once
// The network in virtual time: a synthetic population drawn from the hardware catalog (shared
// and dedicated seats, pods of identical machines), Poisson job arrivals drawn from a stated mix
// of model sizes (docs/network.md; jobs no unit of the population could hold are refused on
// arrival), churn of shared seats, run through the coordinator's own JobBook (queue, leases,
// requeues, bounded attempts), Placement and Settlement (pay) on a virtual clock, so what it
// reports is what the coordinator does. Nothing sleeps; a day of a 100k-node network takes
// minutes of CPU.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "network/catalog.h"
#include "network/ledger.h"

namespace orchard::network {

namespace world {
class Population;
}

// The figures so far, once per virtual second, for a live view.
struct SimulationTick {
  int64_t jobs_completed = 0, tokens_generated = 0, queued = 0, running = 0;
  std::map<std::string, double> credits_by_seat;  // credits nodes earned, per seat
};

struct SimulationOptions {
  int64_t nodes = 100000;
  int64_t pods = 2000;           // pods of 2-4 identical Max/Ultra machines, taken from `nodes`
  double jobs_per_s = 500;
  double churn = 0.10;           // fraction of shared seats that leave (and later return) per hour
  double hours = 24;
  double dedicated_fraction = 0.1;
  double lease_timeout_s = 30;   // a vanished node's job returns to the queue after this
  // Spot checks, as the coordinator's (CoordinatorOptions): the share of jobs re-run on a second
  // machine, which holds the job's pay in escrow until then; a machine caught this many times is
  // banned.
  double verify_fraction = 0.05;
  int64_t ban_after_mismatches = 3;
  double cheat_fraction = 0;        // machines whose every output fails its check (caught, fined)
  // Machines that cannot fetch a model they lack: one hands the job back ("model_missing") and
  // is not offered that model again, as on the coordinator.
  double no_download_fraction = 0;
  uint64_t seed = 1;
  // A live view (`orchard simulate --world-port`): every machine is put into `world` (in one of
  // `world_regions`, drawn from its index so the run itself stays the same) and its changes
  // queued as they happen; `pace` is called once per virtual second and may sleep to hold the run
  // to a speed. Both from the simulating thread.
  std::shared_ptr<world::Population> world;
  std::vector<std::string> world_regions;
  int64_t world_epoch_ms = 0;  // Unix ms of virtual time 0 (machines' online_since)
  std::function<void(double virtual_s, const SimulationTick&)> pace;
  bool keep_settlements = false;  // SimulationReport::settlements (small runs)
};

// One completed job as it was paid.
struct SettledJob {
  std::string job;
  std::vector<std::string> nodes;  // that ran it; the first (a pod's leader) was paid
  std::string chip;                // the paid node's
  ledger::Seat seat = ledger::Seat::Shared;
  std::string model;
  int64_t model_bytes = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t elapsed_ms = 0;          // from pickup to the result
  double multiplier = 1;
  int64_t amount = 0;              // micro-credits
};

struct SeatEarnings {
  double machine_hours = 0;   // online time
  double busy_hours = 0;      // time on jobs within the span (a job that lost its lease counts as started)
  double credits = 0;
  int64_t jobs = 0;
  double per_machine_hour() const { return machine_hours > 0 ? credits / machine_hours : 0; }
};

struct SimulationReport {
  int64_t jobs_submitted = 0, jobs_completed = 0, jobs_in_flight = 0, jobs_queued = 0;
  int64_t jobs_refused = 0;   // no unit of the population could ever hold their model
  int64_t jobs_failed = 0;    // leased kMaxAttempts times without a result
  std::map<std::string, int64_t> refused_by_model;
  int64_t jobs_lost = 0;      // submitted - refused - failed - completed - in flight - queued: must be 0
  std::map<std::string, int64_t> queued_by_model;  // still waiting at the end
  int64_t requeued = 0;       // leases lost to churn
  int64_t pod_jobs = 0;
  int64_t checks = 0;          // spot checks completed
  int64_t checks_caught = 0;   // of them, outputs that failed (refunded, the producer fined)
  int64_t checks_pending = 0;  // waiting or running at the end, their jobs' pay in escrow
  int64_t fines = 0;           // micro-credits fined
  int64_t banned = 0;          // machines banned for failed checks
  int64_t hand_backs = 0;      // jobs given back by machines without their model
  double utilization = 0;     // busy machine-time / online machine-time
  double queue_delay_p50_s = 0, queue_delay_p99_s = 0;
  // Wall time of one dispatch pass (the job book placing what waits), and how many passes ran.
  double placement_p50_us = 0, placement_p99_us = 0, placement_max_us = 0;
  int64_t placements = 0;
  int64_t ledger_sum = 0;     // 0
  std::map<std::string, SeatEarnings> earnings;  // "dedicated/ultra", "shared/base", ...
  std::vector<SettledJob> settlements;  // with keep_settlements, in completion order
  double wall_seconds = 0;
  std::string to_text() const;
};

SimulationReport simulate(const SimulationOptions& options, const HardwareCatalog& catalog);

}  // namespace orchard::network
