#!/usr/bin/env bash
# The container deployments of deploy/ (compose, k8s, Dockerfile) checked without a container
# engine, and their command lines run as real processes on loopback (see deploy/check.py).
set -euo pipefail
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import yaml' 2>/dev/null; then
    exec "$py" "$(dirname "$0")/deploy/check.py"
  fi
done
echo "FAIL: needs PyYAML (python3-yaml; scripts/setup.sh installs docker-compose, which brings it)"
exit 1
