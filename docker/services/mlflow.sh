#!/usr/bin/env bash
# The MLflow tracking server in the foreground (exec: the caller stops it by this
# script's pid). Used as is by docker-compose.yml and by tests/stack.py.
#
#   MLFLOW_BACKEND_STORE_URI      where runs live, e.g. postgresql://mlflow:pw@postgres:5432/mlflow
#                                 (required; PostgreSQL needs psycopg2: the `cluster` extra)
#   MLFLOW_ARTIFACTS_DESTINATION  directory (or object-store URI) behind the served artifact
#                                 store (default /mlflow/artifacts); clients upload through
#                                 the server, so no client needs access to it
#   MLFLOW_HOST                   bind address (default 127.0.0.1; 0.0.0.0 inside a container)
#   MLFLOW_PORT                   (default 5000)
#   MLFLOW_WORKERS                server processes (default 2)
#   MLFLOW_SERVER_ALLOWED_HOSTS   Host headers accepted besides localhost and private IPs
#                                 (e.g. the compose service name "mlflow:5000")
#   MLFLOW_SERVER_ENABLE_JOB_EXECUTION  (default false) mlflow's background job runner (GenAI
#                                 features the sweep does not use: 8 more processes)
# mlflow reads these same variables itself; passing them as flags makes them explicit.
set -euo pipefail

: "${MLFLOW_BACKEND_STORE_URI:?set MLFLOW_BACKEND_STORE_URI, e.g. postgresql://user:pw@host:5432/mlflow}"
MLFLOW_ARTIFACTS_DESTINATION="${MLFLOW_ARTIFACTS_DESTINATION:-/mlflow/artifacts}"
MLFLOW_HOST="${MLFLOW_HOST:-127.0.0.1}"
MLFLOW_PORT="${MLFLOW_PORT:-5000}"
MLFLOW_WORKERS="${MLFLOW_WORKERS:-2}"
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"

case "$MLFLOW_ARTIFACTS_DESTINATION" in
    *://*) ;;
    *) mkdir -p "$MLFLOW_ARTIFACTS_DESTINATION" ;;
esac

args=(--backend-store-uri "$MLFLOW_BACKEND_STORE_URI"
      --serve-artifacts --artifacts-destination "$MLFLOW_ARTIFACTS_DESTINATION"
      --host "$MLFLOW_HOST" --port "$MLFLOW_PORT" --workers "$MLFLOW_WORKERS")
if [[ -n "${MLFLOW_SERVER_ALLOWED_HOSTS:-}" ]]; then
    args+=(--allowed-hosts "$MLFLOW_SERVER_ALLOWED_HOSTS")
fi
exec mlflow server "${args[@]}"
