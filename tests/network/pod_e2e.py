#!/usr/bin/env python3
"""End-to-end pods: a coordinator and `orchard node --pod` agents as real processes.

Two "machines" are two network namespaces joined by a veth pair (the pod's cable), each with a
second veth to the root namespace where the coordinator listens (its internet). The leader
starts the pod's ranks through an ssh stand-in that runs the command in the host's namespace;
the member's stand-in also mounts an empty directory over the leader's models folder, so its
rank has no model file and must receive its shard, as on a second Mac. Without permission for
namespaces (not root) both agents run on loopback, naming their places with --pod-rank.

  1. pod: the pod forms from the two registrations; a job runs as a pipeline over both ranks
     (each reports its layers) and gives the text `orchard run` gives on one machine (greedy);
  2. rank_killed: rank 1's process killed mid-job: the leader hands the job back, it runs again
     and completes, with no rank left behind;
  3. leader_killed: the leader's agent killed mid-job: its ranks stop, the job's lease expires
     and it waits in the queue (the member cannot hold the model alone) until a machine that
     can joins and completes it;
  4. agents: no ssh anywhere (the stand-in only notes that it was called): every machine runs an
     `orchard agent`, the hostfile's entries say "agent": true, and the leader's launch asks the
     two agents (the cluster from the node's ORCHARD_CLUSTER, the secret from its --secret-file;
     the member's agent reads its secret from a file too) to start the ranks; the job gives the tokens of one machine and its credits are posted to
     the leader.
Usage: pod_e2e.py ORCHARD_BINARY [scenario...]
"""
import json, os, shutil, signal, subprocess, sys, time

import e2e
from e2e import ORCHARD, TMP, MODELS, free_port, http, kill, wait_for, reference

ONLY = set(sys.argv[2:])
TAG = "op%d" % (os.getpid() % 100000)
NS = [TAG + "a", TAG + "b"]
POD_NET, UPLINK = "10.231.0.", "10.231.%d."  # the pod's cable; each machine's way to the coordinator


def sh(cmd):
    return subprocess.call(cmd, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_namespaces():
    if sh("ip netns add %s-probe" % TAG) != 0:
        return False
    sh("ip netns del %s-probe" % TAG)
    for i, ns in enumerate(NS):
        assert sh("ip netns add " + ns) == 0
        assert sh("ip -n %s link set lo up" % ns) == 0
        up = UPLINK % (i + 1)
        assert sh("ip link add %su type veth peer name %sd netns %s" % (ns, ns, ns)) == 0
        assert sh("ip addr add %s1/24 dev %su && ip link set %su up" % (up, ns, ns)) == 0
        assert sh("ip -n %s addr add %s2/24 dev %sd && ip -n %s link set %sd up" % (ns, up, ns, ns, ns)) == 0
    assert sh("ip link add %sp netns %s type veth peer name %sq netns %s" % (TAG, NS[0], TAG, NS[1])) == 0
    assert sh("ip -n %s addr add %s1/24 dev %sp && ip -n %s link set %sp up" % (NS[0], POD_NET, TAG, NS[0], TAG)) == 0
    assert sh("ip -n %s addr add %s2/24 dev %sq && ip -n %s link set %sq up" % (NS[1], POD_NET, TAG, NS[1], TAG)) == 0
    return True


def remove_namespaces():
    for ns in NS:
        sh("ip netns del " + ns)  # takes its veth ends, and so their peers, with it


def rank_processes():
    """Pids of pod ranks of this test still alive (their command names our models folder)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            args = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if b"pod-rank" in args and any(TMP.encode() in a for a in args):
            found.append(int(pid))
    return found


def rank_pid(rank):
    for pid in rank_processes():
        try:
            env = open("/proc/%d/environ" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if ("ORCHARD_RANK=%d" % rank).encode() in env:
            return pid
    return None


# Offered by each pod member: under the test model's 3.9 MB, so no member holds it alone.
POD_MEMBER_MEMORY = "3M"


# The cluster of the machines' `orchard agent`s in the agents scenario.
CLUSTER, CLUSTER_SECRET = "podc", "pod-cluster-secret"


class Pod:
    """A coordinator and the agents of one two-machine pod; with cluster_agents, an `orchard agent` on
    each machine starts its rank and ssh is never used."""

    def __init__(self, name, netns, delay_ms=0, cluster_agents=False, coordinator_args=()):
        self.netns = netns
        # In namespaces the machines reach the coordinator over their uplinks, not loopback.
        self.net = e2e.Network(name, lease=3, host="0.0.0.0" if netns else "127.0.0.1", args=coordinator_args)
        hosts = [POD_NET + "1", POD_NET + "2"] if netns else ["127.0.0.1", "127.0.0.1"]
        self.hostfile = os.path.join(TMP, name + "-hosts.json")
        self.ssh = os.path.join(TMP, "pod-ssh.sh")
        self.ssh_log = os.path.join(TMP, name + "-ssh.log")
        self.cluster_agents = []
        if cluster_agents:
            # On loopback each agent has ports of its own, which its entry names.
            ports = [(free_port(), free_port()) for _ in range(2)]
            agent = ['true', 'true'] if netns else ['"127.0.0.1:%d"' % tcp for _, tcp in ports]
            with open(self.hostfile, "w") as f:
                f.write('[{"ssh": "%s", "ips": ["%s"], "agent": %s}, {"ssh": "%s", "ips": ["%s"], "agent": %s}]'
                        % (hosts[0], hosts[0], agent[0], hosts[1], hosts[1], agent[1]))
            self.ssh = os.path.join(TMP, name + "-ssh.sh")
            with open(self.ssh, "w") as f:
                f.write('#!/bin/sh\necho "$*" >> %s\nexit 255\n' % self.ssh_log)
            os.chmod(self.ssh, 0o755)
            self.cluster_agents = [self.cluster_agent(name, i, ports[i]) for i in range(2)]
        else:
            with open(self.hostfile, "w") as f:
                f.write('[{"ssh": "%s", "ips": ["%s"]}, {"ssh": "%s", "ips": ["%s"]}]' % (NS[0], hosts[0], NS[1], hosts[1]))
            self.write_ssh_stand_in()
        self.port = free_port()
        self.delay_ms = delay_ms
        self.logs = {}
        self.agents = [self.agent(0), self.agent(1)]
        wait_for("the pod to form", lambda: (lambda t: t["online"] == 2 and t["pods"] == 1)(self.world()["totals"]), 60)

    def cluster_agent(self, name, i, ports):
        """Machine i's `orchard agent`; in namespaces the member's sees an empty folder over the leader's
        models (a mount of its own), so the rank it starts has no model file."""
        log = os.path.join(TMP, "%s-agent%d.log" % (name, i))
        # The member's agent reads the secret from a file, the leader's from its command line.
        secret = ["--secret-file", self.secret_file()] if i == 1 else ["--secret", CLUSTER_SECRET]
        command = [ORCHARD, "agent", "--cluster", CLUSTER] + secret + ["--no-measure", "--probe-every", "3600",
                   "--probe-mb", "8", "--cache-dir", os.path.join(TMP, "%s-agent-cache-%d" % (name, i))]
        if self.netns:
            hide = "mount -t tmpfs tmpfs '%s' && " % MODELS if i == 1 else ""
            argv = ["ip", "netns", "exec", NS[i], "sh", "-c", hide + "exec " + " ".join("'%s'" % a for a in command)]
        else:
            argv = command + ["--port", str(ports[0]), "--agent-port", str(ports[1])]
        p = subprocess.Popen(argv, stdout=open(log, "ab"), stderr=subprocess.STDOUT)
        e2e.PROCS.append(p)
        wait_for("agent %d" % i, lambda: "in cluster '%s'" % CLUSTER in open(log, errors="replace").read(), 30)
        p.log = log
        return p

    def secret_file(self):
        """The cluster secret in a file only this user reads, ended by a line break as `echo` writes it."""
        path = os.path.join(TMP, "cluster-secret")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(CLUSTER_SECRET + "\n")
        return path

    def write_ssh_stand_in(self):
        with open(self.ssh, "w") as f:
            if self.netns:
                f.write('#!/bin/sh\n# ssh stand-in: -o BatchMode=yes HOST COMMAND, HOST a namespace\nshift 2\nhost=$1\n'
                        'if [ "$host" = "%s" ]; then\n'
                        "  exec ip netns exec \"$host\" unshare -m sh -c 'mount -t tmpfs tmpfs \"%s\" && exec sh -c \"$0\"' \"$2\"\n"
                        'fi\nexec ip netns exec "$host" sh -c "$2"\n' % (NS[1], MODELS))
            else:
                f.write('#!/bin/sh\n# ssh stand-in: -o BatchMode=yes HOST COMMAND, every host this one\nexec sh -c "$4"\n')
        os.chmod(self.ssh, 0o755)

    def agent(self, i):
        # The member has a copy of its own (to run jobs alone); the leader's folder is hidden from its rank.
        # Each offers less memory than the model needs, so only the pod can take its jobs (a pod
        # decodes no faster than one of its machines, so a machine that holds a model gets it).
        models = MODELS if i == 0 else os.path.join(TMP, "models-b")
        if not os.path.exists(models):
            shutil.copytree(MODELS, models)
        coordinator = "http://%s1:%d" % (UPLINK % (i + 1), self.net.port) if self.netns else self.net.url
        args = ["node", "--network", coordinator, "--dedicated", "--models", models, "--threads", "1",
                "--key-file", os.path.join(TMP, "%s-%d.key" % (os.path.basename(self.hostfile), i)), "--name", "m%d" % i,
                "--token-delay-ms", str(self.delay_ms), "--max-context", "256", "--max-memory", POD_MEMBER_MEMORY,
                "--pod", "pod-" + os.path.basename(self.hostfile), "--pod-hostfile", self.hostfile,
                "--pod-ssh", self.ssh, "--pod-port", str(self.port)]
        if not self.netns:
            args += ["--pod-rank", str(i)]
        log = os.path.join(TMP, "%s-m%d.log" % (os.path.basename(self.hostfile), i))
        self.logs[i] = log
        prefix = ["ip", "netns", "exec", NS[i]] if self.netns else []
        env = dict(os.environ, ORCHARD_CACHE_DIR=os.path.join(TMP, "cache-%d" % i))
        if self.cluster_agents:  # the leader's launch asks the agents of this cluster
            env.update(ORCHARD_CLUSTER=CLUSTER)
            if i == 0:  # the secret kept off the command line and out of the environment
                args += ["--secret-file", self.secret_file()]
            else:
                env.update(ORCHARD_CLUSTER_SECRET=CLUSTER_SECRET)
        return e2e.spawn(args, log, prefix, env)

    def world(self):
        return http("GET", self.net.url + "/v1/world")[1]

    def log(self, i):
        return open(self.logs[i], errors="replace").read()

    def stop(self):
        # The nodes and the coordinator without a goodbye: on SIGTERM a node leaves, and the
        # coordinator ends, only once the long polls between them (10 s) have returned.
        for p in self.agents + [self.net.proc]:
            kill(p)
        for p in self.cluster_agents:
            kill(p, signal.SIGTERM)

    def earnings(self, i):
        """Member i's balance in credits, as `orchard node status` reads it from the coordinator."""
        out = subprocess.check_output([ORCHARD, "node", "status", "--network", self.net.url, "--key-file",
                                       os.path.join(TMP, "%s-%d.key" % (os.path.basename(self.hostfile), i))]).decode()
        return float(out.split("earnings: ")[1].split()[0])


def scenario_pod(netns):
    pod = Pod("pod", netns)
    for prompt, n in [("The orchard", 16), ("Once upon a time", 24)]:
        job = pod.net.done(pod.net.submit(prompt, n))
        assert job["state"] == "completed", job
        assert job["text"] == reference(prompt, n), (job["text"], reference(prompt, n))
        assert job["finish_reason"] == "length" and job["usage"]["completion_tokens"] == n, job
    log = pod.log(0)
    assert "ran a job over 2 ranks" in log, log
    ranks = [l for l in log.splitlines() if "[network] pod rank " in l]
    assert any("rank 0 of 2" in l and "layers 0-1" in l for l in ranks), ranks
    assert any("rank 1 of 2" in l and "layers 2-3" in l for l in ranks), ranks
    if netns:  # the member's rank had no file: rank 0 sent its shard over the pod's cable
        assert any("rank 1 of 2" in l and "shard received from rank 0" in l for l in ranks), ranks
    assert pod.world()["totals"]["jobs_served"] == 2
    assert not rank_processes()
    pod.stop()


def scenario_agents(netns):
    # No spot check: its escrow would hold the leader's pay until a second machine confirmed it.
    pod = Pod("agents", netns, cluster_agents=True, coordinator_args=["--verify-fraction", "0"])
    prompt, n = "The orchard", 16
    jid = pod.net.submit(prompt, n)
    job = pod.net.done(jid)
    assert job["state"] == "completed", (job, pod.log(0))
    # What `orchard run` gives on one machine (greedy): the same text from as many tokens.
    one = json.loads(subprocess.check_output([ORCHARD, "run", "-m", os.path.join(MODELS, "tiny.gguf"), "-p", prompt, "-n",
                                              str(n), "--temp", "0", "--json", "-c", "256", "-t", "1"],
                                             stderr=subprocess.DEVNULL))
    assert job["text"] == one["text"], (job["text"], one["text"])
    assert job["usage"]["completion_tokens"] == len(one["tokens"]) == n, (job, one)
    assert job["usage"]["prompt_tokens"] == one["prompt_tokens"], (job, one)
    log = pod.log(0)
    assert "ran a job over 2 ranks" in log, log
    ranks = [l for l in log.splitlines() if "[network] pod rank " in l]
    assert any("rank 0 of 2" in l and "layers 0-1" in l and "read the model file" in l for l in ranks), ranks
    assert any("rank 1 of 2" in l and "layers 2-3" in l for l in ranks), ranks
    if netns:  # the member's agent sees no model: its rank received its shard over the pod's cable
        assert any("rank 1 of 2" in l and "shard received from rank 0" in l for l in ranks), ranks
    # Each machine's agent started one rank of the job, and ssh was never called.
    for agent in pod.cluster_agents:
        started = [l for l in open(agent.log, errors="replace").read().splitlines() if "started rank" in l]
        assert len(started) == 1 and started[0].endswith(": node"), started
    assert not os.path.exists(pod.ssh_log), open(pod.ssh_log).read()
    # Credits: the job is settled and paid to the leader, none to the member; the books balance and
    # the audit finds the payment the rules give for the counted tokens.
    audit = pod.net.audit()
    assert audit["completed"] == 1 and audit["sum"] == 0 and audit["consistent"] and not audit["problems"], audit
    assert audit["payments_checked"] >= 1, audit
    assert pod.earnings(0) > 0 and pod.earnings(1) == 0, (pod.earnings(0), pod.earnings(1))
    wait_for("no rank left", lambda: not rank_processes(), 10)
    pod.stop()


def scenario_rank_killed(netns):
    pod = Pod("rankkill", netns, delay_ms=100)
    jid = pod.net.submit("The orchard", 40)
    wait_for("first tokens", lambda: pod.net.job(jid).get("text"), 60)  # streamed while it runs
    victim = wait_for("rank 1", lambda: rank_pid(1), 30)
    os.kill(victim, signal.SIGKILL)
    job = pod.net.done(jid)
    assert job["state"] == "completed" and job["attempts"] >= 2, job
    assert job["text"] == reference("The orchard", 40)
    wait_for("no rank left", lambda: not rank_processes(), 30)
    assert "handing it back" in pod.log(0)
    pod.stop()


def scenario_leader_killed(netns):
    pod = Pod("leaderkill", netns, delay_ms=100)
    jid = pod.net.submit("The orchard", 40)
    wait_for("first tokens", lambda: pod.net.job(jid).get("text"), 60)
    assert rank_pid(1), "rank 1 is not running"
    kill(pod.agents[0])  # SIGKILL: no goodbye, its launcher and ranks must still go
    wait_for("no rank left", lambda: not rank_processes(), 20)
    pod.net.node("alone")  # the member cannot hold the model alone: the job goes back to the queue until this one comes
    job = pod.net.done(jid)
    assert job["state"] == "completed" and job["attempts"] >= 2, job
    assert job["text"] == reference("The orchard", 40)
    assert "registered" in pod.log(1)
    audit = pod.net.audit()
    assert audit["completed"] == 1 and audit["sum"] == 0, audit
    pod.stop()


def main():
    os.makedirs(MODELS)
    subprocess.check_call([ORCHARD, "make-model", "--shape", "tiny", "--type", "q8_0", "-o", os.path.join(MODELS, "tiny.gguf")],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    netns = make_namespaces()
    print("pod machines: " + ("network namespaces %s, %s over veth" % tuple(NS) if netns
                              else "loopback (no permission for network namespaces)"), flush=True)
    try:
        for name, fn in [("pod", scenario_pod), ("rank_killed", scenario_rank_killed),
                         ("leader_killed", scenario_leader_killed), ("agents", scenario_agents)]:
            if ONLY and name not in ONLY:
                continue
            t = time.time()
            fn(netns)
            print("ok %s (%.1f s)" % (name, time.time() - t), flush=True)
    except Exception:
        print("logs in " + TMP, flush=True)
        raise
    finally:
        for p in e2e.PROCS:
            if p.poll() is None:
                p.kill()
        for pid in rank_processes():
            os.kill(pid, signal.SIGKILL)
        if netns:
            remove_namespaces()


if __name__ == "__main__":
    main()
