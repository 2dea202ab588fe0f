#!/usr/bin/env bash
# Builds a dqserve image with deploy/docker/Dockerfile (docs/deploy.md, "Building the images").
#
#   deploy/docker/build-image.sh cuda [--tag T]        full build, CUDA (default dqserve:latest)
#   deploy/docker/build-image.sh cpu  [--tag T]        full build, CPU  (default dqserve:cpu)
#   deploy/docker/build-image.sh cpu --prebuilt DIR    assembled from binaries built outside
#                                                      (DIR: e.g. build/release/bin), no compiling
#   options: --jobs N (compile jobs in the image), --log FILE (the build's output)
#
# Base images: the CUDA image's are nvidia/cuda's (a registry); the CPU image's is Debian
# bookworm: debian:bookworm-slim where a registry answers, else the debootstrap image of
# deploy/docker/base-image.sh (DQ_BASE=registry|debootstrap forces one; DQ_BASE_BUILD and
# DQ_BASE_RUNTIME name any other). A prebuilt image's base must match the system the binaries
# were built on (its packages give their libraries): this machine's Debian release.
# The build runs with --network host (apt-get inside reaches the mirror the host reaches) and
# BuildKit, which reads Dockerfile.dockerignore and builds only the stages the target needs.
# Prints the image's name on stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
flavor=${1:-}
shift || true
tag="" prebuilt="" jobs="" log=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag=$2; shift 2 ;;
    --prebuilt) prebuilt=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    *) echo "build-image: unknown option $1" >&2; exit 2 ;;
  esac
done

# The Debian image that a registry gives, or the debootstrap one.
debian_base() {
  local want=${DQ_BASE:-}
  if [ "$want" != debootstrap ]; then
    if docker image inspect debian:bookworm-slim >/dev/null 2>&1 ||
      timeout 60 docker pull -q debian:bookworm-slim >/dev/null 2>&1; then
      echo debian:bookworm-slim
      return
    fi
    if [ "$want" = registry ]; then
      echo "build-image: cannot pull debian:bookworm-slim (DQ_BASE=registry)" >&2
      return 1
    fi
    echo "build-image: no registry answers; the base is debootstrap's (base-image.sh)" >&2
  fi
  deploy/docker/base-image.sh bookworm
}

args=()
case "$flavor" in
  cuda)
    tag=${tag:-dqserve:latest}
    [ -n "${DQ_BASE_BUILD:-}" ] && args+=(--build-arg "BASE_BUILD=$DQ_BASE_BUILD")
    [ -n "${DQ_BASE_RUNTIME:-}" ] && args+=(--build-arg "BASE_RUNTIME=$DQ_BASE_RUNTIME")
    ;;
  cpu)
    tag=${tag:-dqserve:cpu}
    base=""
    if [ -z "${DQ_BASE_BUILD:-}" ] || [ -z "${DQ_BASE_RUNTIME:-}" ]; then base=$(debian_base); fi
    args+=(--build-arg "BASE_BUILD=${DQ_BASE_BUILD:-$base}"
      --build-arg "BASE_RUNTIME=${DQ_BASE_RUNTIME:-$base}"
      --build-arg DQ_PRESET=release --build-arg DQ_CONFIG=deploy/compose/disagg-cpu.toml)
    ;;
  *)
    echo "usage: $0 cuda|cpu [--prebuilt BIN_DIR] [--tag T] [--jobs N] [--log FILE]" >&2
    exit 2
    ;;
esac
[ -n "$jobs" ] && args+=(--build-arg "DQ_JOBS=$jobs")

stage=build/docker-prebuilt
if [ -n "$prebuilt" ]; then
  # What the `prebuilt` stage copies: the five binaries and the packages of their libraries,
  # found here, where they were built (runtime-libs.sh fails on a library no package owns).
  rm -rf "$stage"
  mkdir -p "$stage/bin"
  for b in dqserve dq-router dq-prefill dq-decode dq-tool; do
    cp "$prebuilt/$b" "$stage/bin/"
  done
  deploy/docker/runtime-libs.sh packages "$stage"/bin/* >"$stage/runtime-packages.txt"
  args+=(--build-arg DQ_BINARIES=prebuilt)
  trap 'rm -rf "$stage"' EXIT
fi

# BuildKit: the CLI's buildx where it has it (Docker 23+ builds with it by default), else the
# BuildKit client built into Docker 20.10's CLI (Debian's docker.io).
docker_build() {
  if docker buildx version >/dev/null 2>&1; then
    docker buildx build --load "$@"
  elif [ -x /usr/bin/docker ] && /usr/bin/docker version -f '{{.Client.Version}}' 2>/dev/null |
    grep -q '^20\.'; then
    DOCKER_BUILDKIT=1 /usr/bin/docker build "$@"
  else
    DOCKER_BUILDKIT=1 docker build "$@"
  fi
}

start=$(date +%s)
echo "build-image: $tag ($flavor${prebuilt:+, prebuilt from $prebuilt})" >&2
out=${log:-/dev/stderr}
if ! docker_build --progress plain --network host -f deploy/docker/Dockerfile --target runtime \
  "${args[@]}" -t "$tag" . >"$out" 2>&1; then
  [ -n "$log" ] && tail -30 "$log" >&2
  echo "build-image: docker build of $tag failed${log:+ (log: $log)}" >&2
  exit 1
fi
size=$(docker image inspect -f '{{.Size}}' "$tag")
echo "build-image: $tag built in $(($(date +%s) - start)) s, $((size / 1000000)) MB" >&2
echo "$tag"
