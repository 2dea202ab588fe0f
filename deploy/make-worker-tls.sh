#!/usr/bin/env bash
# Makes the TLS identity of a compose or Kubernetes deployment (common/worker_tls.h): a
# self-signed P-256 certificate for the name the router checks ("dqserve-worker"), as
# `dqserve up` makes one per run. Prints the .env lines for deploy/docker-compose.yml, and the
# kubectl command for deploy/k8s.
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
# The containers run as uid 10001 (deploy/docker/Dockerfile): the key must be theirs to read.
if [ "$(id -u)" -eq 0 ]; then chown 10001 "$dir/worker.key"; fi
cat <<ENV
# The key is readable only by its owner: $( [ "$(id -u)" -eq 0 ] && echo "uid 10001 (the containers)" || echo "you; for compose run: sudo chown 10001 $dir/worker.key")
# .env for deploy/docker-compose.yml (TLS between the router and the workers):
DQ_TLS_DIR=$(cd "$dir" && pwd)
DQ_WORKER_TLS_CERT=/etc/dqserve/tls/worker.pem
DQ_WORKER_TLS_KEY=/etc/dqserve/tls/worker.key
DQ_WORKER_TLS_CA=/etc/dqserve/tls/worker.pem
# Kubernetes (deploy/k8s maps the secret into DQ_WORKER_TLS_*_PEM):
#   kubectl create secret generic dqserve-worker-tls \\
#     --from-file=worker.pem=$dir/worker.pem --from-file=worker.key=$dir/worker.key
ENV
