#!/usr/bin/env bash
# run.sh — the multi-host tests (ctest hosts.*): ranks on separate network
# "hosts" (namespaces, tests/hosts/netns.sh) talking over TCP, with network
# faults. One case per run:
#
#   run.sh CASE WORKDIR
#
#   gloo_matrix   save layout A (TP 2) on 2 hosts x 2 ranks; load layout B
#                 on 4 hosts x 1 rank (TP 4, read dedup checked) and on
#                 1 host x 3 ranks (TP 3), and on 3 ranks over 2 hosts (the
#                 readers on the host of most of each group's members). The
#                 gloo collective meets through
#                 its TCP store at host 0 (store=ADDR:PORT) with no host=:
#                 each rank must find the address that routes to host 0
#                 (127.0.0.1 cannot reach another namespace).
#   gloo_async    async saves on 2 hosts x 2 ranks, the trainer's context
#                 and the writers each over gloo with their own store port
#                 (MASTER_PORT+1 / +2, docs/deploy.md), loaded back.
#   link_save     a committed checkpoint, then an overwrite on 2 x 2 during
#                 which host 1's link goes down (rank 2 pauses inside the
#                 save while the harness pulls the link, then goes on):
#                 every rank fails with DCP_ETIMEDOUT/DCP_EPEER within its
#                 deadline + 5 s (scenario.c's no-hang check), and the
#                 checkpoint still loads exactly.
#   link_load     the same during a load: every rank fails in time; with
#                 the link back, the load succeeds.
#   netem         delay (20 ms) and loss (3 %) on host 1 (tc netem): save
#                 and load on 2 x 2 succeed, byte-exact. Where the kernel
#                 has no sch_netem: the loss from nftables (3 % of host 1's
#                 packets dropped at random, both ways) and the delay from a
#                 tbf queue (8 Mbit/s, up to 50 ms queued); skipped only when
#                 neither is there.
#   slow_link     the same with both hosts' links limited to 20 Mbit/s
#                 (tc tbf).
#   host_kill     both ranks of host 1 SIGKILLed during an overwrite: the
#                 ranks of host 0 fail in time, the checkpoint still loads
#                 exactly on the remaining host.
#   host_readers  read dedup over the file collective, then mpi (when
#                 found), with 3 ranks on 2 hosts (2 + 1, then 1 + 2):
#                 the lone rank reads and sends nothing, each tensor is
#                 read once (host_reader.c; the readers are on the host of
#                 most members, as with gloo).
#   memtier_peers the memory tier's peer replication (docs/recovery.md) on
#                 2 hosts x 2 ranks over gloo: host 0's writers die with its
#                 trainers; its restarted ranks pull their snapshots from
#                 host 1's writers, element by element (tests/recovery).
#   mpi_matrix    Open MPI launching into the namespaces (its rsh launcher
#                 with tests/hosts/mpi_agent.sh, TCP between hosts): save
#                 on 2 x 2, load on 4 x 1 and on 1 x 3.
#
# Environment (set by tests/hosts/CMakeLists.txt): DCP_SCENARIO, DCP_CLI,
# DCP_ASYNC_TEST, DCP_RECOVERY_TEST, DCP_WRITER, DCP_HOST_READER, DCP_PLUGIN_PATH,
# MPIEXEC (optional).
# Exit 77 (skipped) where namespaces cannot be created.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=netns.sh
. "$here/netns.sh"
case_name=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
D=$work/ckpt
PORT=29500 # each namespace has its own ports: the same number everywhere
fail() { echo "hosts: $case_name: $*" >&2; exit 1; }
scen() { echo "$DCP_SCENARIO --coll gloo --dir $D"; }
store() { echo "store=$(host_addr "$1"):$((PORT + 1))"; }

# A job of WORLD ranks spread as the list of hosts says (rank r on host
# ${hosts[r]}), with the store at the first rank's host.
run_job() { # run_job LIMIT "h0 h1 ..." args...
  local limit=$1 hosts=($2) r
  shift 2
  local world=${#hosts[@]}
  for ((r = 0; r < world; r++)); do
    host_run "${hosts[$r]}" "$r" "$world" $(scen) --coll-options "$(store "${hosts[0]}")" "$@"
  done
  ranks_wait "$limit"
}

# Waits (30 s at most) for the faulty rank's pid file.
await_pause() {
  local n=0
  while [ ! -s "$D.stalled" ]; do
    n=$((n + 1))
    [ $n -gt 600 ] && fail "the faulty rank never reached its fault"
    sleep 0.05
  done
}

# mpi_run "HOST:SLOTS,..." NP PROGRAM ARGS...: Open MPI launching into the
# namespaces (the agent runs its daemon for host "dcph-...-i" inside that
# namespace), TCP between them; ranks fill the hosts in order.
mpi_run() {
  local H=$1 np=$2
  shift 2
  timeout -k 5 90 "$MPIEXEC" --allow-run-as-root --oversubscribe -np "$np" -H "$H" \
    --mca plm_rsh_agent "$here/mpi_agent.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include "198.18.$HOSTS_SUB.0/24" --mca btl self,tcp \
    --mca btl_tcp_if_include "198.18.$HOSTS_SUB.0/24" --mca pml ob1 \
    -x DCP_PLUGIN_PATH -x OMPI_MCA_mpi_yield_when_idle=1 "$@"
}

# readers_check PREFIX WORLD "AWAY...": host_reader.c's statistics
# (PREFIX.R = "payload sent received path"): read dedup ran, each tensor
# was read once in all, and the ranks AWAY from the host of most ranks
# read and sent nothing (the readers are on the receivers' host).
readers_check() {
  local prefix=$1 world=$2 away=" $3 " r payload sent recv path total=0
  for ((r = 0; r < world; r++)); do
    read -r payload sent recv path < "$prefix.$r" || fail "no statistics from rank $r"
    [ "$path" != 0 ] || fail "rank $r: no read dedup (path 0)"
    if [[ $away == *" $r "* ]]; then
      [ "$payload" = 0 ] && [ "$sent" = 0 ] ||
        fail "rank $r, away from the host of most ranks, read $payload bytes and sent $sent"
    fi
    total=$((total + payload))
  done
  [ "$total" = $((8 * 64 * 64 * 4)) ] || fail "the ranks read $total bytes, not each tensor once"
  rm -f "$prefix".*
}

FAULT="--timeout-ms 3000 --fault-rank 2"

case $case_name in
gloo_matrix)
  hosts_up 4
  run_job 60 "0 0 1 1" --mode save --save-tp 2 || fail "save on 2 hosts x 2 ranks"
  run_job 60 "0 1 2 3" --mode load --load-tp 4 --check-reads --expect-path 2 ||
    fail "load on 4 hosts x 1 rank"
  run_job 60 "2 2 2" --mode load --load-tp 3 || fail "load on 1 host x 3 ranks"
  # uneven hosts: read dedup keeps each group's reader on the host of most
  # of its members (2 of 3 on host 0 for everything replicated)
  run_job 60 "0 0 1" --mode load --load-tp 1 --expect-path 2 || fail "load on hosts 0, 0, 1"
  run_job 60 "3 1 1" --mode load --load-tp 3 || fail "load on hosts 3, 1, 1"
  "$DCP_CLI" verify "$D" --quiet || fail "dcp verify"
  ;;
gloo_async)
  hosts_up 2
  a0=$(host_addr 0)
  for r in 0 1 2 3; do
    host_run $((r / 2)) "$r" 4 "$DCP_ASYNC_TEST" basic --dir "$D" --trainer-coll gloo \
      --trainer-opts "store=$a0:$((PORT + 1))" --writer-coll gloo \
      --writer-opts "store=$a0:$((PORT + 2)),job=dcpwriter"
  done
  ranks_wait 120 || fail "async saves with gloo writers on 2 hosts x 2 ranks"
  ;;
link_save | link_load)
  hosts_up 2
  run_job 60 "0 0 1 1" --mode save --save-tp 2 || fail "the first save"
  if [ "$case_name" = link_save ]; then
    args=(--mode save --save-tp 4 --overwrite $FAULT --fault pause --fault-phase save
          --fault-at allreduce:2)
  else
    args=(--mode load --load-tp 4 $FAULT --fault pause --fault-phase load --fault-at bcast:2)
  fi
  for r in 0 1 2 3; do
    host_run $((r / 2)) "$r" 4 $(scen) --coll-options "$(store 0)" "${args[@]}"
  done
  await_pause
  ip link set "$(host_link 1)" down
  touch "$D.stalled.go"
  ranks_wait 40 || fail "a rank did not fail in time with host 1's link down"
  for r in 0 1 2 3; do grep -q '^error' "$D.nohang.$r" || fail "rank $r reported no error"; done
  ip link set "$(host_link 1)" up
  rm -f "$D".stalled* "$D".nohang.*
  run_job 60 "0 0 1 1" --mode load --load-tp 2 || fail "the checkpoint does not load afterwards"
  "$DCP_CLI" verify "$D" --quiet || fail "dcp verify"
  ;;
netem)
  hosts_up 2
  ns1=$(host_ns 1)
  if ip netns exec "$ns1" tc qdisc add dev eth0 root netem delay 20ms loss 3% 2>/dev/null; then
    echo "hosts: netem: tc netem, 20 ms delay and 3 % loss on host 1"
  else
    command -v nft >/dev/null || hosts_skip "neither tc netem (sch_netem) nor nft is available"
    ip netns exec "$ns1" nft -f - <<'NFT' || hosts_skip "no tc netem, and nftables refused the loss rules"
table inet dcp_loss {
  chain out { type filter hook output priority 0; numgen random mod 100 < 3 counter drop; }
  chain in { type filter hook input priority 0; numgen random mod 100 < 3 counter drop; }
}
NFT
    ip netns exec "$ns1" tc qdisc add dev eth0 root tbf rate 8mbit burst 16kbit latency 50ms ||
      hosts_skip "no tc netem, and tc tbf is not available (sch_tbf) for the delay"
    echo "hosts: netem: no sch_netem; 3 % loss both ways (nftables) and a tbf queue on host 1"
  fi
  run_job 120 "0 0 1 1" --save-tp 2 --load-tp 4 || fail "save and load under delay and loss"
  if ip netns exec "$ns1" nft list table inet dcp_loss >"$work/loss" 2>/dev/null; then
    dropped=$(grep -o 'packets [0-9]*' "$work/loss" | awk '{n += $2} END {print n + 0}')
    echo "hosts: netem: $dropped packets dropped on host 1"
    [ "$dropped" -gt 0 ] || fail "the loss rules dropped nothing: the run was not under loss"
  fi
  ;;
slow_link)
  hosts_up 2
  for i in 0 1; do
    ip netns exec "$(host_ns $i)" tc qdisc add dev eth0 root tbf rate 20mbit burst 32kbit \
      latency 100ms || hosts_skip "tc tbf is not available (sch_tbf)"
  done
  run_job 90 "0 0 1 1" --save-tp 2 --load-tp 4 || fail "save and load over slow links"
  ;;
host_kill)
  hosts_up 2
  run_job 60 "0 0 1 1" --mode save --save-tp 2 || fail "the first save"
  for r in 0 1 2 3; do
    host_run $((r / 2)) "$r" 4 $(scen) --coll-options "$(store 0)" --mode save --save-tp 4 \
      --overwrite $FAULT --fault stall --fault-phase save --fault-at gatherv:1 --dead-ranks 2,3
  done
  await_pause
  for pid in $(ip netns pids "$(host_ns 1)"); do kill -9 "$pid"; done
  ranks_wait 40 2 3 || fail "a rank of host 0 did not fail in time"
  for r in 0 1; do grep -q '^error' "$D.nohang.$r" || fail "rank $r reported no error"; done
  rm -f "$D".stalled* "$D".nohang.*
  run_job 60 "0 0" --mode load --load-tp 2 || fail "the checkpoint does not load afterwards"
  "$DCP_CLI" verify "$D" --quiet || fail "dcp verify"
  ;;
host_readers)
  hosts_up 2
  R=$DCP_HOST_READER
  # the file collective: ranks spread "0 0 1", then "0 1 1"
  for spread in "0 0 1:2" "0 1 1:0"; do
    hosts=(${spread%%:*})
    for r in 0 1 2; do
      host_run "${hosts[$r]}" "$r" 3 "$R" --coll file --dir "$D" --rendezvous "$work/rdv" \
        --out "$work/reads"
    done
    ranks_wait 60 || fail "file: save and load on hosts ${spread%%:*}"
    readers_check "$work/reads" 3 "${spread##*:}"
  done
  [ -n "${MPIEXEC:-}" ] || { echo "hosts: $case_name: no mpiexec, mpi not checked"; exit 0; }
  n0=$(host_ns 0) n1=$(host_ns 1)
  mpi_run "$n0:2,$n1:1" 3 "$R" --coll mpi --dir "$D" --out "$work/reads" ||
    fail "mpi: save and load on hosts 0 0 1"
  readers_check "$work/reads" 3 2
  mpi_run "$n0:1,$n1:2" 3 "$R" --coll mpi --dir "$D" --out "$work/reads" ||
    fail "mpi: save and load on hosts 0 1 1"
  readers_check "$work/reads" 3 0
  ;;
memtier_peers)
  hosts_up 2
  a0=$(host_addr 0)
  for r in 0 1 2 3; do
    host_run $((r / 2)) "$r" 4 "$DCP_RECOVERY_TEST" peers --dir "$work/r" --gloo "$a0:$PORT"
  done
  ranks_wait 120 || fail "host 0's ranks did not restore from host 1's memory"
  ;;
mpi_matrix)
  [ -n "${MPIEXEC:-}" ] || hosts_skip "no mpiexec"
  hosts_up 4
  mpi() { mpi_run "$1" "$2" "$DCP_SCENARIO" --coll mpi --dir "$D" "${@:3}"; }
  n0=$(host_ns 0) n1=$(host_ns 1) n2=$(host_ns 2) n3=$(host_ns 3)
  mpi "$n0:2,$n1:2" 4 --mode save --save-tp 2 || fail "mpi: save on 2 hosts x 2 ranks"
  mpi "$n0:1,$n1:1,$n2:1,$n3:1" 4 --mode load --load-tp 4 || fail "mpi: load on 4 hosts x 1 rank"
  mpi "$n2:3" 3 --mode load --load-tp 3 || fail "mpi: load on 1 host x 3 ranks"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "hosts: $case_name: ok"
