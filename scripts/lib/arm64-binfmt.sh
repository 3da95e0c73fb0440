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
  if ! arm64_binfmt_run true 2>/dev/null; then
    echo "[arm64] cannot register qemu-aarch64 in a namespace's own binfmt_misc (Linux 6.7 or later, and" \
         "user namespaces, are needed): tests that start other orchard processes would fail" >&2
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
# The user namespace maps every uid and gid to itself, not root alone (unshare --map-root-user):
# the PostgreSQL tests, run as root, start their server as the 'postgres' user (runuser), which
# needs that user to exist in the namespace and setgroups to be allowed. unshare 2.38 maps more
# than one id only through newuidmap, so this shell writes the maps itself, as root of the parent
# namespace, once the namespaced shell has said its pid through a fifo; that shell then waits on
# a second fifo before it uses them. Called as root (a user's namespace could map only itself).
arm64_binfmt_run() {
  local sync helper status=0 unshare_args=(--user --mount) setup=$arm64_binfmt_register
  if [[ ${ORCHARD_ARM64_NETNS:-0} == 1 ]]; then
    unshare_args+=(--net)
    setup="$setup && $arm64_netns_setup"
  fi
  sync=$(mktemp -d)
  mkfifo -m 666 "$sync/pid" "$sync/go"
  chmod 755 "$sync"  # the shell opens the fifos as 'nobody' before its ids are mapped
  (
    read -r pid <"$sync/pid" || exit 1
    echo "0 0 4294967295" >"/proc/$pid/uid_map" && echo "0 0 4294967295" >"/proc/$pid/gid_map"
    echo "$?" >"$sync/go"
  ) &
  helper=$!
  QEMU_CPU=max unshare "${unshare_args[@]}" sh -c 'echo $$ >"$0/pid"; read -r mapped <"$0/go"; [ "$mapped" = 0 ] &&
    '"$setup"' && exec "$@"' "$sync" "$@" || status=$?
  kill "$helper" 2>/dev/null || true
  wait "$helper" 2>/dev/null || true
  rm -rf "$sync"
  return "$status"
}
