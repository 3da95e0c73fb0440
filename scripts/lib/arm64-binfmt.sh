# Sourced by the arm64 test scripts. Tests and the product start other orchard processes (ranks,
# agents, servers) with execve, which the kernel can only hand to qemu through binfmt_misc. So
# commands run in a user and mount namespace of their own with binfmt_misc mounted there and
# qemu-aarch64 registered for arm64 ELF files (Linux 6.7 or later): nothing changes for the rest
# of the machine.

# Registers qemu-aarch64 for arm64 ELF files (magic and mask as Debian's qemu-user-binfmt has them)
# in this namespace's own binfmt_misc; F opens qemu now, so it is found whatever the mounts.
arm64_binfmt_register='mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc &&
printf "%s" ":qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:$(command -v qemu-aarch64):F" \
  > /proc/sys/fs/binfmt_misc/register'

# Exits with 2 and says why when this machine cannot give a namespace its own binfmt_misc.
arm64_binfmt_check() {
  if ! unshare --user --map-root-user --mount --fork sh -c "$arm64_binfmt_register" 2>/dev/null; then
    echo "[arm64] cannot register qemu-aarch64 in a namespace's own binfmt_misc (Linux 6.7 or later, and" \
         "unprivileged user namespaces, are needed): tests that start other orchard processes would fail" >&2
    exit 2
  fi
}

# With ORCHARD_ARM64_NETNS=1, a network namespace of its own as well (loopback only) with a
# private /run/netns: the tests that build machines out of network namespaces (tests/cluster's
# Netns*, which run `ip netns add` and skip when it fails) can then make them, as root in the
# user namespace. `ip netns add` returns to the namespace it came from, and may only when that
# namespace belongs to this user namespace, not the machine's.
arm64_netns_setup='ip link set lo up && { [ -d /run/netns ] || mkdir /run/netns; } && mount -t tmpfs tmpfs /run/netns'

# Runs "$@" in such a namespace. QEMU_CPU=max: every arm64 feature qemu emulates (dotprod
# included), for each qemu that binfmt starts too.
arm64_binfmt_run() {
  if [[ ${ORCHARD_ARM64_NETNS:-0} == 1 ]]; then
    QEMU_CPU=max unshare --user --map-root-user --mount --net --fork \
      sh -c "$arm64_binfmt_register && $arm64_netns_setup"' && exec "$@"' sh "$@"
  else
    QEMU_CPU=max unshare --user --map-root-user --mount --fork sh -c "$arm64_binfmt_register"' && exec "$@"' sh "$@"
  fi
}
