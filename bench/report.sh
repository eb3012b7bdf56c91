#!/usr/bin/env bash
# report.sh — run every benchmark at a size that fits a few minutes on a
# small machine and print one table of the ratios each measures against its
# own same-run baseline (docs/benchmarks.md, "One-command report"). Called
# by `tools/dev.sh bench`; asserts nothing about the figures.
#
#   bench/report.sh BUILD_DIR [--scale S] [--keep-logs]
#
# --scale multiplies every size (default 1: dcp-bench 2 layers of hidden
# 2048 in bf16, about 200 MB; async-bench 64 MiB per rank; the torch peer
# 64 MiB). Each benchmark prints "RATIO|key|median|min|max|n|target|what"
# lines; this script collects them. A benchmark that cannot run here (no
# mpirun, no torch) is reported as skipped, with the reason.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: bench/report.sh BUILD_DIR [--scale S] [--keep-logs]}
shift
B=$(cd "$B" && pwd)
scale=1 keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --scale) scale=$2; shift 2 ;;
    --keep-logs) keep=1; shift ;;
    *) echo "usage: bench/report.sh BUILD_DIR [--scale S] [--keep-logs]" >&2; exit 2 ;;
  esac
done
RANKS=4
work=$(mktemp -d /var/tmp/dcp-bench-report.XXXXXX)
logs=$work/logs
mkdir -p "$logs"
export DCP_PLUGIN_PATH=$B/lib/dcp DCP_WRITER=$B/bin/dcp-writer
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1
skipped=()

# launch NAME ARGS...: 4 ranks of a bench program, under mpirun when the
# mpi collective is built, else forked over the file collective
launch() {
  local name=$1; shift
  if command -v mpirun >/dev/null && [ -e "$B/lib/dcp/dcp-coll-mpi.so" ]; then
    mpirun -np $RANKS --oversubscribe --allow-run-as-root --mca btl self,vader \
      "$B/bench/$name" --coll mpi "$@"
  else
    "$B/tests/integration/dcp_launch" $RANKS 900 "$B/bench/$name" --coll file \
      --rendezvous "$work/rdv-$name" "$@"
  fi
}

run() { # run LOG CMD...: the command's output into LOG, a line on the screen
  local log=$1; shift
  local t0=$SECONDS
  echo "== $(basename "$log" .log): $*" | sed "s|$B/||g"
  if "$@" >"$log" 2>&1; then
    echo "   done in $((SECONDS - t0)) s"
  else
    echo "   FAILED after $((SECONDS - t0)) s (last lines of $log):"
    tail -n 5 "$log" | sed 's/^/   /'
    skipped+=("$(basename "$log" .log): failed")
  fi
}

int() { awk -v a="$1" -v s="$scale" 'BEGIN { v = int(a * s); print v < 1 ? 1 : v }'; }

hidden=$(int 2048)
run "$logs/dcp-bench.log" launch dcp-bench --tp 4 --layers 2 --hidden "$hidden" --repeat 5 \
  --dir "$work/dcp-bench"
run "$logs/async-bench.log" launch async-bench --mib "$(int 64)" --reps 5 --first-reps 3 \
  --dir "$work/async-bench" --rendezvous "$work/rdv-async"
if [ -d "$B/python" ] && /usr/bin/python3 -c "import torch" 2>/dev/null; then
  run "$logs/torch-peer.log" env PYTHONPATH="$B/python" OMP_NUM_THREADS=1 \
    PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 bench/torch_peer.py --mib "$(int 64)" \
    --repeat 3 --dir "$work/peer"
else
  skipped+=("torch peer: no torch or no Python binding in $B")
fi

cpu=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)
echo
echo "libdcp benchmark report, $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) CPUs ($cpu);" \
     "$(awk '{ print "load average " $1 ", " $2 ", " $3 }' /proc/loadavg)"
echo "each figure: median over the repetitions of the ratio to its same-run baseline;" \
     "spread: min - max"
echo
printf '| %-64s | %7s | %-15s | %2s | %-7s |\n' figure median spread n target
printf '|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..66})" "---------" \
  "-----------------" "----" "---------"
# in the order of issue 15's table; keys it does not know go last
order="async.steady async.background async.first async.first_prepared disk.save"
order="$order disk.load_resharded disk.load_same disk.load_bytes disk.load_device_bytes peer.save peer.load"
cat "$logs"/*.log 2>/dev/null | grep '^RATIO|' | sort -t'|' -k2,2 -u |
  awk -F'|' -v order="$order" '
    BEGIN { n = split(order, o, " "); for (i = 1; i <= n; i++) rank[o[i]] = i }
    { printf "%03d|%s\n", ($2 in rank) ? rank[$2] : 999, $0 }' | sort -t'|' -k1,1n |
  awk -F'|' '{ printf "| %-64s | %7s | %-15s | %2s | %-7s |\n", $9, $4, $5 " - " $6, $7, $8 }'
for s in "${skipped[@]+"${skipped[@]}"}"; do echo "skipped: $s"; done
if [ "$keep" = 1 ]; then
  echo "logs: $logs"
  rm -rf "$work/dcp-bench" "$work/async-bench" "$work/peer"
else
  rm -rf "$work"
fi
