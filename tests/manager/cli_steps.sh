#!/bin/sh
# `dcp steps` and `dcp gc` on a manager's root (docs/manager.md, docs/cli.md):
# the listing (text and JSON), a dry run that deletes nothing, a run that
# deletes exactly what the policy says and never the link or the newest step,
# and the exit codes of bad input.
#   cli_steps.sh DCP MANAGER_TEST WORKDIR
set -eu
dcp=$1 populate=$2 work=$3
root=$work/root
"$populate" populate --dir "$work"
fail() { echo "FAILED: $*"; exit 1; }

out=$("$dcp" steps "$root")
echo "$out"
[ "$(echo "$out" | grep -c '	committed	')" = 5 ] || fail "five committed steps"
echo "$out" | grep -q '^6	incomplete	' || fail "step 6 incomplete"
echo "$out" | grep -q '^7	foreign	0	a symbolic link' || fail "step 7 foreign"
echo "$out" | grep -q '^latest	step-5$' || fail "latest"
"$dcp" steps "$root" --json > "$work/steps.json"
grep -q '"command": "steps"' "$work/steps.json" || fail "json command"
grep -q '"latest": 5' "$work/steps.json" || fail "json latest"
grep -q '"error": null' "$work/steps.json" || fail "json error"

"$dcp" gc "$root" --keep-last 2 --keep-every 2 --dry-run > "$work/dry.txt"
cat "$work/dry.txt"
[ "$(grep -c '^would delete' "$work/dry.txt")" = 3 ] || fail "dry run: 1, 3, 6"
[ -d "$root/step-1" ] && [ -d "$root/step-6" ] || fail "a dry run deleted"

"$dcp" gc "$root" --keep-last 2 --keep-every 2 --json > "$work/gc.json"
cat "$work/gc.json"
for s in 1 3 6; do [ ! -e "$root/step-$s" ] || fail "step $s not deleted"; done
for s in 2 4 5; do [ -f "$root/step-$s/.metadata" ] || fail "step $s deleted"; done
[ -L "$root/step-7" ] && [ -d "$work" ] || fail "the link or its target"
grep -q '"failed": 0' "$work/gc.json" || fail "json failed"

rc=0; "$dcp" gc "$root" --keep-last 0 2>/dev/null || rc=$?
[ $rc = 2 ] || fail "--keep-last 0 is a usage error ($rc)"
rc=0; "$dcp" gc "$root" 2>/dev/null || rc=$?
[ $rc = 2 ] || fail "--keep-last is required ($rc)"
rc=0; "$dcp" steps "$work/nothing" 2>/dev/null || rc=$?
[ $rc = 3 ] || fail "a missing root ($rc)"
rc=0; "$dcp" steps "$root/step-2/.metadata" 2>/dev/null || rc=$?
[ $rc = 3 ] || fail "a file as root ($rc)"

# the shared option parser (tools/dcp/cli.c): usage errors are exit 2 with
# no JSON on stdout, even with --json
usage() { # usage WHY ARGS...: exit 2, nothing on stdout
  why=$1; shift
  rc=0; out=$("$dcp" "$@" 2>"$work/usage.err") || rc=$?
  [ $rc = 2 ] || fail "$why: exit $rc, not 2"
  [ -z "$out" ] || fail "$why: stdout not empty: $out"
  [ -s "$work/usage.err" ] || fail "$why: no reason on stderr"
}
usage "unknown option" steps "$root" --bogus --json
usage "unknown short option" steps "$root" -x
usage "unknown short option, another command" ls "$root/step-2" -x
usage "gc's option on steps" steps "$root" --keep-last 2
usage "extra ROOT" steps "$root" "$root"
usage "missing value" gc "$root" --keep-last
usage "empty value" gc "$root" --keep-last=
usage "a flag with a value" gc "$root" --keep-last 2 --dry-run=1
usage "negative" gc "$root" --keep-last -1 --json
usage "--keep-every 0" gc "$root" --keep-last 2 --keep-every 0
usage "--keep-last too large" gc "$root" --keep-last 4294967296 --dry-run
usage "--keep-every overflows" gc "$root" --keep-last 1 --keep-every 99999999999999999999999
grep -q "keep-every takes a whole number" "$work/usage.err" || fail "the reason of --keep-every"
"$dcp" gc "$root" --keep-last=2 --keep-every=2 --dry-run --quiet > /dev/null ||
  fail "--opt=value"

# --json on an error: one object, exit_code 3, the error named
rc=0; "$dcp" steps "$work/nothing" --json > "$work/err.json" || rc=$?
[ $rc = 3 ] || fail "steps --json on a missing root ($rc)"
grep -q '"exit_code": 3' "$work/err.json" && grep -q '"reason": "not found"' "$work/err.json" ||
  fail "steps --json error object"
rc=0; "$dcp" gc "$work/nothing" --keep-last 1 --json > "$work/err.json" || rc=$?
[ $rc = 3 ] || fail "gc --json on a missing root ($rc)"
grep -q '"exit_code": 3' "$work/err.json" && grep -q '"status": -10' "$work/err.json" ||
  fail "gc --json error object"
[ ! -e "$work/nothing" ] || fail "gc created a missing root"

# gc of an empty root still reports its (empty) lists
mkdir "$work/empty"
"$dcp" gc "$work/empty" --keep-last 1 --json > "$work/empty.json" || fail "gc of an empty root"
grep -q '"deleted": \[\]' "$work/empty.json" && grep -q '"kept": \[\]' "$work/empty.json" ||
  fail "gc of an empty root: deleted/kept missing"
echo "cli steps/gc: ok"
