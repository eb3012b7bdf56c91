#!/usr/bin/env bash
# check_layers.sh — the include rules of docs/layers.md: the folders of src/
# form a graph that only points down, plugins/ include only include/ and
# plugins/, include/ only include/. Prints every violation and exits 1 when
# there is one (0 when the tree keeps the rules, 2 on a usage error).
#
#   tools/check_layers.sh [ROOT]        (ROOT: the source tree, default ..)
#
# Run by ctest as abi.layers (tests/CMakeLists.txt). Plain bash and grep:
# it reads #include lines, it compiles nothing.
set -u

root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"}
if [[ ! -d $root/src || ! -d $root/include ]]; then
  echo "check_layers: $root has no src/ and include/" >&2
  exit 2
fi
cd "$root" || exit 2
root=$PWD

# ---- the rules ------------------------------------------------------------
# What each folder of src/ may include besides itself and include/ (dcp.h,
# dcp_plugin.h). Lower layers first; a layer may include every layer below
# it, never one above, and never a sibling unless listed here.
declare -A may=(
  [base]=""
  [model]="base"
  [planner]="model base"
  [metadata]="model base"
  [core]="planner metadata model base"
  [runtime]="core planner metadata model base"
  [writer]="runtime core planner metadata model base"
  [async]="writer runtime core planner metadata model base"
  [convert]="runtime core planner metadata model base"
  [manager]="async writer convert runtime core planner metadata model base"
)

# Upward edges kept on purpose: "file include" pairs, each explained in
# docs/layers.md ("Exceptions"). None today; one added here without its
# paragraph there is a review error.
exceptions=()

# ---- helpers --------------------------------------------------------------
violations=0
fail() {
  echo "$1"
  violations=$((violations + 1))
}

# The includes of a file as "LINE<TAB>KIND<TAB>NAME", one a line; KIND is
# q for "name", b for <name>.
includes_of() {
  grep -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*("[^"]+"|<[^>]+>)' "$1" |
    sed -E -e 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1\tq\t\2/' \
      -e 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*<([^>]+)>.*/\1\tb\t\2/'
}

# Whether an include names a header of src/ ("<folder>/...").
names_src() { [[ $1 == */* && -n ${may[${1%%/*}]+set} ]]; }

is_exception() {
  local e
  for e in ${exceptions[@]+"${exceptions[@]}"}; do
    [[ $e == "$1 $2" ]] && return 0
  done
  return 1
}

declare -A used_exception=()

# ---- src/ -----------------------------------------------------------------
for dir in src/*/; do
  folder=$(basename "$dir")
  if [[ -z ${may[$folder]+set} ]]; then
    fail "src/$folder/: a folder with no layer (give it one in tools/check_layers.sh and docs/layers.md)"
  fi
done
while IFS= read -r file; do
  fail "$file: a source outside the folders of src/ (put it in the layer it belongs to)"
done < <(find src -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' \) | sort)

while IFS= read -r file; do
  folder=${file#src/}
  folder=${folder%%/*}
  [[ -z ${may[$folder]+set} ]] && continue # reported above
  while IFS=$'\t' read -r line kind inc; do
    [[ -z $line ]] && continue
    if ! names_src "$inc"; then
      # a public header, or a system one in brackets
      [[ $kind == b || -f include/$inc ]] && continue
      fail "$file:$line: includes \"$inc\", which is neither in include/ nor \"<folder>/...\" of src/"
      continue
    fi
    target=${inc%%/*}
    [[ $target == "$folder" ]] && continue
    if [[ " ${may[$folder]} " == *" $target "* ]]; then continue; fi
    if is_exception "$file" "$inc"; then
      used_exception["$file $inc"]=1
      continue
    fi
    allowed=${may[$folder]:-nothing of src/}
    fail "$file:$line: $folder/ may not include $inc ($folder/ may include: ${allowed// /, })"
  done < <(includes_of "$file")
done < <(find src -type f \( -name '*.c' -o -name '*.h' \) | sort)

for e in ${exceptions[@]+"${exceptions[@]}"}; do
  [[ -n ${used_exception[$e]+set} ]] ||
    fail "tools/check_layers.sh: the exception \"$e\" no longer occurs (remove it here and in docs/layers.md)"
done

# ---- include/ -------------------------------------------------------------
while IFS= read -r file; do
  while IFS=$'\t' read -r line kind inc; do
    [[ -z $line ]] && continue
    if names_src "$inc"; then
      fail "$file:$line: the public headers may not include $inc (a src/ header)"
    elif [[ $kind == q && ! -f include/$inc ]]; then
      fail "$file:$line: the public headers may include only include/, not \"$inc\""
    fi
  done < <(includes_of "$file")
done < <(find include -type f -name '*.h' | sort)

# ---- plugins/ -------------------------------------------------------------
# A plugin is built against include/ and plugins/ alone (plugins/CMakeLists.txt
# gives it include/ and its own folder): an include must name a file there,
# never a header of src/.
while IFS= read -r file; do
  here=$(dirname "$file")
  while IFS=$'\t' read -r line kind inc; do
    [[ -z $line ]] && continue
    if names_src "$inc" || [[ $inc == *src/* ]]; then
      fail "$file:$line: plugins may not include $inc (a src/ header; use include/ and plugins/)"
      continue
    fi
    [[ $kind == b ]] && continue # a system header
    resolved=$(realpath -m "$here/$inc")
    case $resolved in "$root"/plugins/*) [[ -f $resolved ]] && continue ;; esac
    [[ -f include/$inc ]] && continue
    # a header of another plugins/ folder on the include path (coll/common)
    [[ -n $(find plugins -path "*/$inc" -type f -print -quit) ]] && continue
    fail "$file:$line: plugins may include only include/ and plugins/, not \"$inc\""
  done < <(includes_of "$file")
done < <(find plugins -type f \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.hh' -o -name '*.cpp' \) | sort)

# ... and their CMakeLists give them no src/ include path (dcp_core and
# dcp_obj carry one).
while IFS= read -r hit; do
  fail "${hit%%:*}:$(cut -d: -f2 <<<"$hit"): plugins may not build against src/ ($(cut -d: -f3- <<<"$hit" | sed -E 's/^[[:space:]]+//'))"
done < <(find plugins -name CMakeLists.txt -print0 | sort -z |
           xargs -0 -r grep -n -H -E 'PROJECT_SOURCE_DIR\}/src|\bdcp_(core|obj)\b')

if ((violations)); then
  echo "check_layers: $violations violation(s) of the layer rules (docs/layers.md)"
  exit 1
fi
echo "check_layers: the layers of src/, include/ and plugins/ keep their rules"
exit 0
