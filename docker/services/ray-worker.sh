#!/usr/bin/env bash
# A Ray worker node in the foreground (`ray start --block`: killing this pid's process
# group stops this node and only it). Used by docker-compose.yml and tests/stack.py.
#
#   KVSWEEP_RAY_ADDRESS  the head's GCS address, host:port (required)
#   KVSWEEP_RAY_CPUS     CPUs this node offers = simulator actors it hosts (default: all)
#   KVSWEEP_RAY_NODE_IP  address this node advertises (default: Ray's guess)
#   KVSWEEP_RAY_ARGS     more `ray start` flags, split on spaces
# Never use `ray stop` to stop it: that kills every Ray node on the machine.
set -euo pipefail

: "${KVSWEEP_RAY_ADDRESS:?set KVSWEEP_RAY_ADDRESS to the head, host:port}"
# must match the head (see ray-head.sh): with authentication on, this node is refused
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
export RAY_USAGE_STATS_ENABLED="${RAY_USAGE_STATS_ENABLED:-0}"

args=(--address="$KVSWEEP_RAY_ADDRESS" --block --disable-usage-stats)
[[ -z "${KVSWEEP_RAY_CPUS:-}" ]] || args+=(--num-cpus="$KVSWEEP_RAY_CPUS")
[[ -z "${KVSWEEP_RAY_NODE_IP:-}" ]] || args+=(--node-ip-address="$KVSWEEP_RAY_NODE_IP")
# shellcheck disable=SC2206
extra=(${KVSWEEP_RAY_ARGS:-})
exec ray start "${args[@]}" "${extra[@]}"
