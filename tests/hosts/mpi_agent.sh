#!/bin/sh
# mpi_agent.sh — Open MPI's remote launcher for the multi-host tests
# (--mca plm_rsh_agent): where ssh would log into HOST, this enters the
# network namespace of that name (tests/hosts/netns.sh) and runs the
# daemon's command line there with sh.
#   mpi_agent.sh [-options...] HOST COMMAND...
while [ $# -gt 0 ]; do
  case $1 in
    -*) shift ;;
    *) break ;;
  esac
done
host=$1
shift
exec ip netns exec "$host" /bin/sh -c "$*"
