#!/bin/sh
# Topology script for the docker-compose cluster (upstream ScriptBasedMapping,
# networkTopologyScriptFileName): called with host names, prints one rack per host.
# 6 bookies in 3 racks: bookie-1/bookie-4 -> /rack1, bookie-2/bookie-5 -> /rack2, bookie-3/bookie-6 -> /rack3.
for host in "$@"; do
  case "$host" in
    bookie-1|bookie-4) echo /rack1 ;;
    bookie-2|bookie-5) echo /rack2 ;;
    bookie-3|bookie-6) echo /rack3 ;;
    *) echo /default-rack ;;
  esac
done
