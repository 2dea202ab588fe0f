#!/bin/bash
# The image's entrypoint (deploy/docker/Dockerfile): the worker credential from a file, then the
# command as given. Compose hands secrets over as files (/run/secrets/NAME) while the binaries
# read DQ_WORKER_KEY from the environment (common/worker_key.h), never from a command line.
#   DQ_WORKER_KEY_FILE=/run/secrets/dq_worker_key  ->  DQ_WORKER_KEY=<its first line>
set -euo pipefail
if [ -n "${DQ_WORKER_KEY_FILE:-}" ]; then
  if [ ! -f "$DQ_WORKER_KEY_FILE" ] || [ ! -r "$DQ_WORKER_KEY_FILE" ]; then
    echo "error: DQ_WORKER_KEY_FILE=$DQ_WORKER_KEY_FILE is not a file this user (uid $(id -u))" \
      "can read; make it with deploy/make-worker-tls.sh (it writes worker-bearer-key)" >&2
    exit 1
  fi
  IFS= read -r DQ_WORKER_KEY <"$DQ_WORKER_KEY_FILE" || true
  if [ -z "$DQ_WORKER_KEY" ]; then
    echo "error: $DQ_WORKER_KEY_FILE is empty: the worker key must not be" >&2
    exit 1
  fi
  export DQ_WORKER_KEY
  unset DQ_WORKER_KEY_FILE
fi
exec "$@"
