#!/usr/bin/env bash
# The Ray head node in the foreground (`ray start --block`: killing this pid's process
# group stops this node and only it). Used by docker-compose.yml and tests/stack.py.
#
#   KVSWEEP_RAY_PORT     GCS port that workers and drivers join (default 6379)
#   KVSWEEP_RAY_CPUS     CPUs this node offers = simulator actors it hosts (default: all)
#   KVSWEEP_RAY_NODE_IP  address this node advertises (default: Ray's guess; 127.0.0.1
#                        for a cluster that lives on one machine)
#   KVSWEEP_RAY_ARGS     more `ray start` flags, split on spaces (ports, dashboard, temp dir)
# Never use `ray stop` to stop it: that kills every Ray node on the machine.
set -euo pipefail

# The pinned Ray turns on token authentication by default and then refuses worker nodes
# that do not carry the head's token (InvalidAuthToken); the cluster's network is the
# trust boundary here, so it is off unless the caller says otherwise.
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
export RAY_USAGE_STATS_ENABLED="${RAY_USAGE_STATS_ENABLED:-0}"

args=(--head --port="${KVSWEEP_RAY_PORT:-6379}" --block --disable-usage-stats)
[[ -z "${KVSWEEP_RAY_CPUS:-}" ]] || args+=(--num-cpus="$KVSWEEP_RAY_CPUS")
[[ -z "${KVSWEEP_RAY_NODE_IP:-}" ]] || args+=(--node-ip-address="$KVSWEEP_RAY_NODE_IP")
# shellcheck disable=SC2206  # word splitting of the extra flags is the point
extra=(${KVSWEEP_RAY_ARGS:-})
exec ray start "${args[@]}" "${extra[@]}"
