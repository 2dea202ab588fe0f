#!/usr/bin/env bash
# Makes the worker credentials of a compose or Kubernetes deployment: the TLS identity
# (common/worker_tls.h), a self-signed P-256 certificate for the name the router checks
# ("dqserve-worker"), as `dqserve up` makes one per run, and the worker key (common/worker_key.h:
# 256 random bits, hex; kept when it exists). The compose files read the three files as secrets
# (worker.pem, worker.key, worker-bearer-key); prints the kubectl commands for deploy/k8s.
#   deploy/make-worker-tls.sh [DIR]     (default: deploy/tls)
set -euo pipefail
dir=${1:-$(dirname "$0")/tls}
name=${DQ_WORKER_TLS_NAME:-dqserve-worker}
mkdir -p "$dir"
umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$dir/worker.key" -out "$dir/worker.pem" -days 365 -subj "/CN=$name" \
  -addext "subjectAltName=DNS:$name" 2>/dev/null
chmod 0644 "$dir/worker.pem"
# No newline: Kubernetes puts the file into DQ_WORKER_KEY as it is.
[ -s "$dir/worker-bearer-key" ] || printf %s "$(openssl rand -hex 32)" >"$dir/worker-bearer-key"
# The containers run as uid 10001 (deploy/docker/Dockerfile): the keys must be theirs to read.
if [ "$(id -u)" -eq 0 ]; then chown 10001 "$dir/worker.key" "$dir/worker-bearer-key"; fi
cat <<ENV
# The keys are readable only by their owner: $( [ "$(id -u)" -eq 0 ] && echo "uid 10001 (the containers)" || echo "you; for compose run: sudo chown 10001 $dir/worker.key $dir/worker-bearer-key")
# deploy/docker-compose*.yml read $dir/{worker.pem,worker.key,worker-bearer-key} as secrets;
# another folder: DQ_TLS_DIR=$(cd "$dir" && pwd)
# Kubernetes (deploy/k8s maps the secrets into DQ_WORKER_TLS_*_PEM and DQ_WORKER_KEY):
#   kubectl create secret generic dqserve-worker-tls \\
#     --from-file=worker.pem=$dir/worker.pem --from-file=worker.key=$dir/worker.key
#   kubectl create secret generic dqserve-worker-key --from-file=key=$dir/worker-bearer-key
ENV
