# netns.sh — "hosts" on one machine for the multi-host tests: network
# namespaces joined by a bridge. Sourced by tests/hosts/run.sh (bash).
#
#   hosts_up H      creates H namespaces dcph-<pid>-0 .. H-1, each with a
#                   veth pair to the bridge dh<pid>b of the root namespace
#                   and an address 198.18.<S>.<i+1>/24 (198.18.0.0/15 is the
#                   range set aside for network tests, RFC 2544; S is
#                   derived from the pid), lo up; the bridge itself gets
#                   198.18.<S>.254 (an mpirun in the root namespace is
#                   reached there). Exits 77 (ctest's skip) with a message
#                   when namespaces cannot be created (not root, no
#                   iproute2, no CAP_NET_ADMIN).
#   host_ns I       the name of namespace I;  host_addr I  its address
#   host_link I     the root side of host I's veth (ip link set ... down)
#   host_run I RANK WORLD cmd...   starts cmd in namespace I as RANK of
#                   WORLD (DCP_TEST_RANK / DCP_TEST_WORLD) in the
#                   background; its pid is appended to RANK_PIDS (index =
#                   rank)
#   ranks_wait LIMIT_S [RANK...]  waits for every rank (a hang past LIMIT_S
#                   kills them all); sets RANK_RC[r]; ranks listed are not
#                   counted as failures
#   hosts_down      removes everything (also run on exit, by a trap)
#
# Everything is named after this shell's pid, so parallel runs do not
# collide; leftovers of a run that was killed (its pid gone) are removed
# first. Traffic stays on the namespaces' own addresses.

HOSTS_TAG=$$
HOSTS_N=0
HOSTS_SUB=$(( (HOSTS_TAG % 250) + 1 )) # moved off a subnet in use by hosts_up
RANK_PIDS=()
RANK_RC=()

host_ns() { echo "dcph-$HOSTS_TAG-$1"; }
host_addr() { echo "198.18.$HOSTS_SUB.$(( $1 + 1 ))"; }
host_link() { echo "dh${HOSTS_TAG}v$1"; }
hosts_bridge() { echo "dh${HOSTS_TAG}b"; }

# 0 when process $1 runs (a zombie does not).
tag_alive() {
  [ -d "/proc/$1" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]
}

# Removes namespaces and links of runs whose shell is gone.
hosts_sweep() {
  local ns pid link
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^dcph-[0-9]*-[0-9]*$'); do
    pid=${ns#dcph-}; pid=${pid%%-*}
    tag_alive "$pid" || ip netns del "$ns" 2>/dev/null
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
                grep '^dh[0-9]*[bv][0-9]*$'); do
    pid=${link#dh}; pid=${pid%%[bv]*}
    tag_alive "$pid" || ip link del "$link" 2>/dev/null
  done
}

hosts_down() {
  local i pid
  for pid in "${RANK_PIDS[@]}"; do kill -9 "$pid" 2>/dev/null; done
  for ((i = 0; i < HOSTS_N; i++)); do
    for pid in $(ip netns pids "$(host_ns "$i")" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns del "$(host_ns "$i")" 2>/dev/null
    ip link del "$(host_link "$i")" 2>/dev/null
  done
  ip link del "$(hosts_bridge)" 2>/dev/null
  HOSTS_N=0
}

hosts_skip() {
  echo "SKIP: $* (the multi-host tests need root, iproute2 and network namespaces)"
  exit 77
}

hosts_up() {
  local n=$1 i ns
  command -v ip >/dev/null || hosts_skip "no 'ip' command (install iproute2)"
  [ "$(id -u)" -eq 0 ] || hosts_skip "not root"
  hosts_sweep
  trap hosts_down EXIT
  trap 'exit 143' TERM INT
  ip netns add "$(host_ns probe)" 2>/dev/null || hosts_skip "cannot create a network namespace"
  ip netns del "$(host_ns probe)"
  local try=0 # a subnet that no other run (another bridge) uses now
  while ip -o -4 addr show 2>/dev/null | grep -q " 198\.18\.$HOSTS_SUB\." && [ $try -lt 250 ]; do
    HOSTS_SUB=$(( HOSTS_SUB % 250 + 1 ))
    try=$((try + 1))
  done
  ip link add "$(hosts_bridge)" type bridge || hosts_skip "cannot create a bridge"
  ip addr add "198.18.$HOSTS_SUB.254/24" dev "$(hosts_bridge)"
  ip link set "$(hosts_bridge)" up
  for ((i = 0; i < n; i++)); do
    ns=$(host_ns "$i")
    ip netns add "$ns" || hosts_skip "cannot create namespace $ns"
    HOSTS_N=$((i + 1))
    ip link add "$(host_link "$i")" type veth peer name "dh${HOSTS_TAG}p$i" || hosts_skip "no veth"
    ip link set "dh${HOSTS_TAG}p$i" netns "$ns"
    ip -n "$ns" link set "dh${HOSTS_TAG}p$i" name eth0
    ip -n "$ns" addr add "$(host_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip link set "$(host_link "$i")" master "$(hosts_bridge)"
    ip link set "$(host_link "$i")" up
  done
}

host_run() {
  local i=$1 rank=$2 world=$3
  shift 3
  ip netns exec "$(host_ns "$i")" env DCP_TEST_RANK="$rank" DCP_TEST_WORLD="$world" "$@" &
  RANK_PIDS[$rank]=$!
}

# ranks_wait LIMIT_S [EXEMPT_RANK...]: 0 when every rank not exempt exited 0.
ranks_wait() {
  local limit=$1 r start fails=0 exempt
  shift
  start=$(date +%s)
  for r in "${!RANK_PIDS[@]}"; do
    while kill -0 "${RANK_PIDS[$r]}" 2>/dev/null &&
          [ "$(cut -d' ' -f3 "/proc/${RANK_PIDS[$r]}/stat" 2>/dev/null)" != Z ]; do
      if (( $(date +%s) - start > limit )); then
        echo "hosts: rank $r still runs after $limit s: a hang; killing every rank" >&2
        for p in "${RANK_PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
        fails=$((fails + 1))
      fi
      sleep 0.05
    done
    wait "${RANK_PIDS[$r]}" 2>/dev/null
    RANK_RC[$r]=$?
    exempt=0
    for e in "$@"; do [ "$e" = "$r" ] && exempt=1; done
    if [ "${RANK_RC[$r]}" -ne 0 ] && [ $exempt = 0 ]; then
      echo "hosts: rank $r failed (exit status ${RANK_RC[$r]})" >&2
      fails=$((fails + 1))
    fi
  done
  RANK_PIDS=()
  return $((fails > 0))
}
