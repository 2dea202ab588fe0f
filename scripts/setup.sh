#!/usr/bin/env bash
# Idempotent set-up: system packages, the default model, and the build.
#   scripts/setup.sh [preset]     (preset: release by default; dev, release-cuda)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-${DQ_PRESET:-release}}

packages=(build-essential cmake ninja-build ccache pkg-config git unzip python3 python3-pip
  python3-venv libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libspdlog-dev nlohmann-json3-dev libcpp-httplib-dev libboost-dev libcli11-dev libtomlplusplus-dev
  libpcre2-dev clang-format libgtest-dev libgmock-dev libucx-dev curl openssl python3-jinja2
  python3-jsonschema  # judges structured output (tests/e2e/serve/structured_output.py)
  docker-compose  # CI: validates deploy/docker-compose*.yml (tests/e2e/deploy_config_test.sh)
  docker.io debootstrap)  # CI: builds and runs the CPU image (tests/e2e/deploy/compose_cpu_test.sh)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

scripts/fetch-model.sh
# The GPU build's ucx KV transport moves device memory only with UCX built with CUDA: fetch the
# libucx-cu13 wheel (its libraries travel to the GPU machine; bench/pack_ucx_libs.sh).
if [ "$preset" = release-cuda ]; then
  scripts/fetch-ucx-cuda.sh
fi

echo "setup: building (preset $preset)"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
