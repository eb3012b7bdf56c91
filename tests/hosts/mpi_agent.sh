#!/bin/sh
# mpi_agent.sh — Open MPI's remote launcher for the multi-host tests
# (--mca plm_rsh_agent): where ssh would log into HOST, this enters the
# network namespace of that name (tests/hosts/netns.sh) and runs the
# daemon's command line there with sh, in a UTS namespace of its own whose
# host name is HOST: the namespaces share the machine's host name
# otherwise, and Open MPI's daemons tell nodes apart by the name they
# report (four daemons that all say "vm" made launches hang now and then).
#   mpi_agent.sh [-options...] HOST COMMAND...
while [ $# -gt 0 ]; do
  case $1 in
    -*) shift ;;
    *) break ;;
  esac
done
host=$1
shift
if command -v unshare >/dev/null 2>&1; then
  exec ip netns exec "$host" unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' \
    "$host" "$*"
fi
exec ip netns exec "$host" /bin/sh -c "$*"
