#!/usr/bin/env bash
# dev.sh — one entry point for setting up, building, testing and demoing
# libdcp on a Debian machine. Every command installs what it needs first.
#
#   tools/dev.sh demo          build, then run the main job: a 4-rank save with
#                              one layout and a load with another (tools/demo)
#   tools/dev.sh plansim [...] build, then plan a 10,240-rank job in one process
#   tools/dev.sh test          build with -Werror, run the whole ctest suite
#   tools/dev.sh asan          build with ASan+UBSan, run the unit tests
#   tools/dev.sh fuzz [SECS]   build the libFuzzer targets with clang, run each
#   tools/dev.sh install-check install to a prefix, build a consumer against it
#   tools/dev.sh deps          only install the Debian packages
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}

PACKAGES=(build-essential cmake pkg-config libcmocka-dev libxxhash-dev libzstd-dev libjansson-dev clang
          libclang-rt-14-dev libopenmpi-dev openmpi-bin libgloo-dev
          python3-torch python3-numpy python3-dev)

deps() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

build() { # build DIR [cmake args...]
  local dir=$1; shift
  cmake -S "$ROOT" -B "$dir" -DDCP_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$JOBS"
}

cmd=${1:-test}
shift || true
case "$cmd" in
  deps) deps ;;
  demo)
    deps
    build build
    dir=$(mktemp -d)
    if [ -e build/lib/dcp/dcp-coll-mpi.so ] && command -v mpirun >/dev/null; then
      echo "== 4 ranks under mpirun (mpi collective)"
      OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1 \
      mpirun -np 4 --oversubscribe --allow-run-as-root --mca btl self,vader \
        build/tools/dcp-demo --coll mpi --dir "$dir/ckpt" --rendezvous "$dir/rdv" "$@"
    else
      echo "== 4 forked ranks (file-exchange collective)"
      build/tests/integration/dcp_launch 4 120 build/tools/dcp-demo --coll file \
        --dir "$dir/ckpt" --rendezvous "$dir/rdv" "$@"
    fi
    rm -rf "$dir"
    ;;
  plansim)
    deps
    build build
    ./build/bench/plansim "$@"
    ;;
  test)
    deps
    build build
    ctest --test-dir build --output-on-failure -j "$JOBS" "$@"
    ;;
  asan)
    deps
    build build-asan -DDCP_SANITIZE=ON -DDCP_BUILD_BENCH=OFF
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --test-dir build-asan --output-on-failure -j "$JOBS" "$@"
    ;;
  fuzz)
    deps
    secs=${1:-30}
    CC=clang build build-fuzz -DDCP_BUILD_FUZZ=ON -DDCP_BUILD_TESTS=OFF -DDCP_BUILD_BENCH=OFF
    for target in build-fuzz/tests/fuzz/fuzz_*; do
      [ -x "$target" ] || continue
      name=$(basename "$target")
      corpus=$(mktemp -d)
      seeds=tests/fuzz/corpus/${name#fuzz_}
      [ -d "$seeds" ] || seeds=tests/fuzz/corpus/$(echo "${name#fuzz_}" | cut -d_ -f1)
      echo "== $name for ${secs}s"
      "$target" -max_total_time="$secs" -print_final_stats=1 "$corpus" ${seeds:+$( [ -d "$seeds" ] && echo "$seeds")} 2>&1 | tail -n 5
      rm -rf "$corpus"
    done
    ;;
  install-check)
    deps
    build build
    prefix=$(mktemp -d)
    cmake --install build --prefix "$prefix" >/dev/null
    cmake -S tests/install -B "$prefix/consumer-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
    cmake --build "$prefix/consumer-build" >/dev/null
    "$prefix/consumer-build/consumer"
    # pkg-config route
    PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/$(gcc -print-multiarch)/pkgconfig" \
      cc tests/install/consumer.c -o "$prefix/consumer-pc" \
      $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/$(gcc -print-multiarch)/pkgconfig" pkg-config --cflags --libs dcp) \
      -Wl,-rpath,"$prefix/lib:$prefix/lib/$(gcc -print-multiarch)"
    "$prefix/consumer-pc"
    lib=$(find "$prefix" -name 'libdcp.so.*.*' | head -n 1)
    readelf -d "$lib" | grep SONAME
    # only dcp_ symbols are exported from the installed library
    if nm -D --defined-only "$lib" | awk '$2 ~ /[TDBR]/ {print $3}' | grep -v '^dcp_' | grep -v '^_'; then
      echo "install-check: symbols without the dcp_ prefix are exported" >&2; exit 1
    fi
    rm -rf "$prefix"
    ;;
  *) echo "usage: tools/dev.sh demo|plansim|test|asan|fuzz [secs]|install-check|deps" >&2; exit 2 ;;
esac
