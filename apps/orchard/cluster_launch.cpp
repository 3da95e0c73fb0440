#include "apps/orchard/cluster_launch.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "apps/orchard/plan_machines.h"
#include "cluster/local_machine.h"
#include "cluster/planner.h"
#include "cluster/rank_service.h"
#include "cluster/topology.h"
#include "comm/bootstrap.h"
#include "comm/launcher.h"
#include "core/error.h"
#include "parallel/launch.h"

namespace orchard::app {
namespace {

std::vector<std::string>& command_line_storage() {
  static std::vector<std::string> words;
  return words;
}

bool launched_as_rank() { return std::getenv("ORCHARD_WORLD") || std::getenv("OMPI_COMM_WORLD_SIZE"); }

// The command line without the flags that placed the job (each rank is told its strategy
// instead; the secret stays off the remote command lines).
std::vector<std::string> rank_command(const parallel::SplitOptions& split) {
  static const std::map<std::string, bool> placing = {
      {"--hostfile", true}, {"--discover", false}, {"--ssh", true},  {"--cluster", true},       {"--secret", true},
      {"--strategy", true}, {"--tp", true},        {"--pp", true},   {"--split-weights", true}, {"--world", true},
      {"--expert-replicas", true}};
  const std::vector<std::string>& words = command_line_storage();
  ORCHARD_CHECK(!words.empty(), "the command line was not remembered");
  // The ranks run this very binary, at the same path on every host (as mlx.launch runs the same
  // python everywhere).
  std::vector<std::string> out = {comm::current_executable()};
  for (size_t i = 1; i < words.size(); ++i) {
    const std::string& w = words[i];
    const std::string name = w.substr(0, w.find('='));
    const auto it = placing.find(name);
    if (it == placing.end()) {
      out.push_back(w);
      continue;
    }
    if (it->second && name == w) ++i;  // "--flag value": the value goes too
  }
  out.push_back("--strategy");
  out.push_back(split.strategy);
  if (split.tp > 0) out.insert(out.end(), {"--tp", std::to_string(split.tp)});
  if (split.expert_replicas > 0) out.insert(out.end(), {"--expert-replicas", std::to_string(split.expert_replicas)});
  if (!split.split_weights.empty()) {
    std::string list;
    for (double w : split.split_weights) list += (list.empty() ? "" : ",") + fmt::format("{:.6g}", w);
    out.insert(out.end(), {"--split-weights", list});
  }
  return out;
}

// Where the ranks of `machines` (indices into t.machines) reach machine `m`: the addresses its
// peers among them measured links to, fastest first, else every address it announced. The
// comm layer dials a peer's first address (and stripes sockets over the others).
std::vector<std::string> reachable_addresses(const cluster::Topology& t, const std::vector<size_t>& machines, size_t m) {
  std::set<std::string> peers;
  for (size_t i : machines)
    if (i != m) peers.insert(t.machines[i].node_id);
  std::vector<const cluster::LinkMeasurement*> links;
  for (const cluster::LinkMeasurement& l : t.links)
    if (l.to_node == t.machines[m].node_id && peers.count(l.from_node) && l.gbps > 0) links.push_back(&l);
  std::sort(links.begin(), links.end(), [](auto* a, auto* b) { return a->gbps > b->gbps; });
  std::vector<std::string> addresses;
  auto add = [&](const std::string& a) {
    if (!a.empty() && std::find(addresses.begin(), addresses.end(), a) == addresses.end()) addresses.push_back(a);
  };
  for (const auto* l : links) add(l->to_addr);
  if (addresses.empty())
    for (const cluster::NetInterface& n : t.machines[m].interfaces)
      if (n.address.rfind("127.", 0) != 0) add(n.address);
  if (addresses.empty())
    throw Error(error_message("cluster", "{} announced no address its peers can reach", t.machines[m].hostname));
  return addresses;
}

// Whether machine `m` is this one: it announced an address of one of this machine's interfaces.
bool is_this_machine(const cluster::Topology& t, size_t m) {
  static const std::vector<cluster::NetInterface> mine = cluster::list_interfaces();
  for (const cluster::NetInterface& theirs : t.machines[m].interfaces)
    for (const cluster::NetInterface& n : mine)
      if (!theirs.address.empty() && theirs.address == n.address) return true;
  return false;
}

parallel::HostEntry discovered_host(const cluster::Topology& t, const std::vector<size_t>& machines, size_t m, int rank,
                                    bool by_agent) {
  parallel::HostEntry h;
  for (const std::string& a : reachable_addresses(t, machines, m))
    h.endpoints.push_back(fmt::format("{}:{}", a, comm::kDefaultBasePort + rank));
  h.ssh = h.endpoints.front().substr(0, h.endpoints.front().rfind(':'));
  h.local = is_this_machine(t, m);  // no ssh server or agent request needed to reach ourselves
  if (by_agent) h.agent = fmt::format("{}:{}", h.ssh, t.machines[m].agent_port);
  return h;
}

cluster::PlanRequest plan_request(const SplitJob& job) {
  cluster::PlanRequest r;
  r.model = cluster::ModelFacts::from_gguf(model::gguf::Reader::open(job.model_path));
  r.work.context = job.context > 0 ? job.context : r.model.config.context_length;
  r.work.chunk = job.batch;
  r.work.cache_type = job.cache_type;
  r.default_link = {300, 10};  // unmeasured pairs: a typical TCP link
  return r;
}

// Moves machine `first` to rank 0 (with its weight) when the plan uses it and its ranks are
// interchangeable (pipeline, tensor): the machine the user typed on serves the API and prints
// the output.
void put_first(cluster::Plan& plan, size_t first) {
  parallel::Layout& l = plan.predicted.layout;
  auto it = std::find(plan.machine_indices.begin(), plan.machine_indices.end(), first);
  if (it == plan.machine_indices.end() || it == plan.machine_indices.begin() || (l.tp > 1 && l.pp > 1)) return;
  const size_t from = static_cast<size_t>(it - plan.machine_indices.begin());
  auto rotate_to_front = [&](auto& v) {
    if (v.size() > from) std::rotate(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(from), v.begin() + static_cast<std::ptrdiff_t>(from) + 1);
  };
  rotate_to_front(plan.machine_indices);
  rotate_to_front(plan.hosts);
  rotate_to_front(l.stage_weights);
  rotate_to_front(l.tensor_weights);
}

void adopt_plan(const cluster::Plan& plan, parallel::SplitOptions& split) {
  const parallel::Layout& l = plan.predicted.layout;
  split.strategy = parallel::strategy_name(l.strategy);
  split.world = l.world();
  split.tp = l.tp > 1 && l.pp > 1 ? l.tp : 0;  // hybrid, or expert groups in pipeline stages
  split.expert_replicas = l.expert_replicas;  // --strategy auto takes none of its own
  split.pp = 0;
  split.split_weights = l.pp > 1 ? l.stage_weights : l.tensor_weights;
  std::fprintf(stderr, "%s", cluster::format_plan(plan).c_str());
}

// --world N --strategy auto: ranks of one machine share its memory and bandwidth, so the split
// competes with one rank that has the whole machine, not with one of the shares.
void plan_local_ranks(const SplitJob& job, parallel::SplitOptions& split) {
  cluster::PlanRequest whole = plan_request(job);
  whole.machines = {local_machine_spec({}, whole.model, 1, 0)};
  cluster::Plan best = cluster::make_plan(whole);
  cluster::PlanRequest shares = whole;
  shares.machines.clear();
  for (int i = 0; i < split.world; ++i) shares.machines.push_back(local_machine_spec({}, shares.model, split.world, i));
  shares.default_link = {0, 0};  // ranks of one machine talk through shared memory
  shares.link_source = "one machine";
  shares.world = split.world;
  try {
    cluster::Plan split_plan = cluster::make_plan(shares);
    if (split_plan.predicted.gen_tok_s > best.predicted.gen_tok_s * cluster::kFewerMachinesGain)
      best = std::move(split_plan);
    else
      std::fprintf(stderr, "%d ranks of this machine would predict %.1f tok/s against %.1f for one rank with every core: one rank it is\n",
                   split.world, split_plan.predicted.gen_tok_s, best.predicted.gen_tok_s);
  } catch (const Error& e) {
    std::fprintf(stderr, "no split over %d ranks of this machine: %s\n", split.world, e.what());
  }
  adopt_plan(best, split);
}

// The hostfile's hosts; with --strategy auto, those the plan chose, in its rank order.
std::vector<parallel::HostEntry> hostfile_hosts(const ClusterLaunchFlags& f, parallel::SplitOptions& split, const SplitJob& job) {
  std::vector<parallel::HostEntry> hosts = parallel::read_hostfile(f.hostfile, comm::kDefaultBasePort);
  if (split.strategy != "auto") return hosts;
  cluster::PlanRequest r = plan_request(job);
  std::vector<std::string> sources;
  hostfile_machines(f.hostfile, {}, f.discovery, r, sources);
  cluster::Plan p = cluster::make_plan(r);
  put_first(p, 0);  // the hostfile's first host is rank 0, as with orchard launch
  adopt_plan(p, split);
  std::vector<parallel::HostEntry> chosen;
  for (size_t i : p.machine_indices) chosen.push_back(hosts[i]);
  return chosen;
}

// The machines the agents found, this one first; with --strategy auto, those the plan chose.
std::vector<parallel::HostEntry> discovered_hosts(const ClusterLaunchFlags& f, parallel::SplitOptions& split, const SplitJob& job) {
  const cluster::Topology t = f.discovery.find();
  if (t.machines.empty())
    throw Error(error_message("cluster", "no agent of cluster '{}' answered or announced itself (start `orchard agent` on each machine)",
                              f.discovery.cluster));
  std::vector<size_t> chosen(t.machines.size());
  for (size_t i = 0; i < chosen.size(); ++i) chosen[i] = i;
  if (split.strategy == "auto") {
    cluster::PlanRequest r = plan_request(job);
    for (const cluster::Announcement& a : t.machines) r.machines.push_back(cluster::machine_spec(a));
    r.links = cluster::link_matrix(t, r.default_link);
    cluster::Plan p = cluster::make_plan(r);
    put_first(p, 0);  // the local agent lists this machine first
    adopt_plan(p, split);
    chosen = p.machine_indices;
  }
  std::vector<parallel::HostEntry> hosts;
  for (size_t rank = 0; rank < chosen.size(); ++rank)
    hosts.push_back(discovered_host(t, chosen, chosen[rank], static_cast<int>(rank), !f.ssh_option->count()));
  return hosts;
}

}  // namespace

void add_cluster_launch_flags(CLI::App* cmd, ClusterLaunchFlags& f) {
  cmd->add_option("--hostfile", f.hostfile,
                  "MLX-style JSON hostfile: start one rank per host over ssh, or through its agent where the entry "
                  "says \"agent\": true")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--discover", f.discover, "Run on the machines this cluster's agents found (see orchard cluster)");
  f.ssh_option = cmd->add_option("--ssh", f.ssh,
                                 "ssh client that reaches the hosts of a --hostfile (those without \"agent\"); with "
                                 "--discover, reach the other machines over ssh instead of through their agents")
                     ->capture_default_str();
  add_cluster_identity_flags(cmd, f.discovery);
  cmd->add_option("--agent-port", f.discovery.agent_port,
                  "TCP port of this machine's agent, which --discover and serve's cluster page ask")
      ->capture_default_str();
}

void start_ranks_by_agents(std::vector<parallel::HostEntry>& hosts, const ClusterFlags& cluster,
                           parallel::LaunchOptions& launch) {
  for (parallel::HostEntry& h : hosts)  // "agent": true in a hostfile: the agents' port
    if (h.agent.size() > 2 && h.agent.compare(h.agent.size() - 2, 2, ":0") == 0)
      h.agent = h.agent.substr(0, h.agent.size() - 1) + std::to_string(cluster.agent_port);
  launch.start_by_agent = [name = cluster.cluster, secret = cluster.secret](const parallel::HostEntry& host,
                                                                           const parallel::RankCommand& rank) {
    // An agent that vanishes mid-run is a lost rank, not a crash of the launcher (macOS has no
    // MSG_NOSIGNAL, and the dialled socket no SO_NOSIGPIPE), as with ClusterFlags::find.
    std::signal(SIGPIPE, SIG_IGN);
    return cluster::start_rank_by_agent(host.agent, host.ssh, name, secret, rank);
  };
}

void remember_command_line(int argc, char** argv) { command_line_storage().assign(argv, argv + argc); }

std::optional<int> place_split(const ClusterLaunchFlags& f, parallel::SplitOptions& split, const SplitJob& job) {
  std::optional<HostsLaunch> placed = place_on_hosts(f, split, job);
  if (!placed) return std::nullopt;
  return parallel::launch_on_hosts(placed->hosts, placed->launch);
}

bool host_is_this_machine(const parallel::HostEntry& host) {
  if (host.local) return true;
  if (host.endpoints.empty()) return false;
  const std::string& endpoint = host.endpoints.front();
  const std::string address = !endpoint.empty() && endpoint.front() == '['
                                  ? endpoint.substr(1, endpoint.find(']') - 1)
                                  : endpoint.substr(0, endpoint.rfind(':'));
  if (address.rfind("127.", 0) == 0 || address == "::1" || address == "localhost") return true;
  for (const cluster::NetInterface& n : cluster::list_interfaces())
    if (n.address == address) return true;
  return false;
}

std::optional<HostsLaunch> place_on_hosts(const ClusterLaunchFlags& f, parallel::SplitOptions& split, const SplitJob& job) {
  const bool on_hosts = !f.hostfile.empty() || f.discover;
  const bool plan = split.strategy == "auto";
  if (!f.hostfile.empty() && f.discover) throw Error(error_message("cluster", "give --hostfile or --discover, not both"));
  if (launched_as_rank()) {
    if (on_hosts || plan)
      throw Error(error_message("cluster", "this process is a rank of a launched job: its strategy must be given "
                                           "(--hostfile, --discover and --strategy auto belong to the command that starts the ranks)"));
    return std::nullopt;
  }
  if (on_hosts && split.world > 1)
    throw Error(error_message("cluster", "--world starts ranks on this machine; with --hostfile or --discover the hosts are the ranks"));
  if (!on_hosts) {
    if (plan && split.world <= 1) split.strategy = "single";
    if (plan && split.world > 1) plan_local_ranks(job, split);
    return std::nullopt;
  }

  std::vector<parallel::HostEntry> hosts = f.discover ? discovered_hosts(f, split, job) : hostfile_hosts(f, split, job);
  if (!plan) {
    if (split.strategy == "single") hosts.resize(1);
    split.world = static_cast<int>(hosts.size());
  }
  // A hostfile host keeps the port its entry gave it when the plan drops or reorders hosts:
  // ports only need to differ between ranks of one machine.
  HostsLaunch placed;
  parallel::LaunchOptions& launch = placed.launch;
  launch.base.backend = split.backend == "mpi" ? comm::Backend::Mpi : comm::Backend::Ring;  // shm cannot cross machines
  launch.base.timeout = std::chrono::milliseconds(static_cast<int64_t>(split.timeout_s * 1000));
  launch.base.link.latency_us = split.link_latency_us;
  launch.base.link.gbps = split.link_gbps;
  launch.ssh_command = f.ssh;
  launch.command = rank_command(split);
  start_ranks_by_agents(hosts, f.discovery, launch);
  std::string names;
  for (const auto& h : hosts) names += (names.empty() ? "" : ", ") + h.ssh;
  std::fprintf(stderr, "starting %zu rank(s), %s: %s\n", hosts.size(), split.strategy.c_str(), names.c_str());
  placed.hosts = std::move(hosts);
  return placed;
}

}  // namespace orchard::app
