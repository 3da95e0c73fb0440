#!/usr/bin/env bash
# Side-by-side comm figures for docs/BENCHMARKS.md: each Orchard backend against OpenMPI in the
# same run (ring vs MPI over TCP + a bare TCP ping-pong; shm vs MPI's shared memory), 2 ranks.
# Usage: bench/comm/run.sh [path/to/orchard] [extra bench-comm flags...]
set -euo pipefail
orchard=${1:-build/orchard}
shift || true
sizes=4K,16K,64K,1M,16M
echo "== ring (TCP) vs MPI_Allreduce --mca btl tcp,self vs TCP ping-pong"
"$orchard" bench-comm --backend ring --world 2 --sizes "$sizes" --compare-mpi --compare-tcp "$@"
echo "== shm vs MPI_Allreduce (default: shared memory)"
"$orchard" bench-comm --backend shm --world 2 --sizes "$sizes" --compare-mpi "$@"
echo "== ring over an emulated RDMA-class link (50 us) and a TCP-class one (300 us, 10 Gb/s)"
"$orchard" bench-comm --backend ring --world 2 --sizes 4K,1M --link-latency-us 50 "$@"
"$orchard" bench-comm --backend ring --world 2 --sizes 4K,1M --link-latency-us 300 --link-gbit-s 10 "$@"
