#!/bin/sh
# nohang.sh — harness of the no-hang scenario tests (scenario.c --fault).
#
#   nohang.sh LIMIT_S CKPT WORLD FAULT_RANK REPORTS RC -- command...
#
# Runs the command (dcp_launch or mpirun with the scenario) and fails when
#  - it has not ended by itself within LIMIT_S seconds (a hang: it is then
#    terminated; mpirun passes that on to its ranks),
#  - RC is 0 and it failed (dcp_launch checks every surviving rank itself;
#    mpirun fails whenever a rank stalls or exits, so its tests pass "any"),
#  - a surviving rank reported anything but an error in CKPT.nohang.<rank>,
#    or (REPORTS "all") one did not report at all; with "some" (a rank that
#    exits under mpirun makes mpirun tear the job down, so survivors may be
#    killed before they can report) the reports present must be errors,
#  - the stalled rank (pid in CKPT.stalled) is still there afterwards: it is
#    killed either way, so nothing lingers.
set -u
limit=$1 ckpt=$2 world=$3 fault_rank=$4 reports=$5 want_rc=$6
shift 6
[ "$1" = "--" ] && shift
DCP_LAUNCH_FAULT_RANK=$fault_rank
export DCP_LAUNCH_FAULT_RANK
fail=0
start=$(date +%s)
timeout -k 5 "$limit" "$@"
rc=$?
took=$(( $(date +%s) - start ))
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "nohang: the job did not end within $limit s: a hang" >&2
  fail=1
elif [ "$want_rc" = 0 ] && [ "$rc" -ne 0 ]; then
  echo "nohang: the job failed (exit status $rc)" >&2
  fail=1
fi
r=0
got=0
while [ "$r" -lt "$world" ]; do
  f=$ckpt.nohang.$r
  if [ "$r" -ne "$fault_rank" ]; then
    if [ -f "$f" ]; then
      got=$((got + 1))
      case "$(cat "$f")" in
        error*) ;;
        *) echo "nohang: rank $r reported: $(cat "$f")" >&2; fail=1 ;;
      esac
    elif [ "$reports" = all ]; then
      echo "nohang: rank $r never reported its failure" >&2
      fail=1
    fi
  fi
  r=$((r + 1))
done
# A process that is gone or a zombie (dead, not yet reaped) does not linger.
alive() {
  [ -r "/proc/$1/stat" ] || return 1
  case "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" in Z|X|"") return 1 ;; esac
}
if [ -f "$ckpt.stalled" ]; then
  pid=$(cat "$ckpt.stalled")
  n=0
  while alive "$pid" && [ "$n" -lt 50 ]; do # mpirun's kill may still be on its way
    sleep 0.1
    n=$((n + 1))
  done
  if alive "$pid"; then
    echo "nohang: the stalled rank (pid $pid) outlived the job: killing it" >&2
    kill -9 "$pid" 2>/dev/null
    fail=1
  fi
fi
echo "nohang: job ended in $took s (limit $limit s), exit status $rc; $got of $((world - 1)) survivors reported an error in time"
exit $fail
