#!/usr/bin/env bash
# Fetches UCX built with CUDA (cuda_copy, cuda_ipc; UCX 1.22.0) for the ucx KV transport on
# device memory: the libucx-cu13 wheel from PyPI (downloaded without dependencies, checked against
# its sha256), unpacked into .cache/ucx-cu13/ (git-ignored; never committed). Debian's UCX 1.13,
# which the build compiles and links against, has no CUDA; at run time the wheel's libraries
# replace it (kvtransfer/README.md, "UCX with CUDA"; bench/pack_ucx_libs.sh packs them for the
# GPU machine). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.22.0
wheel=libucx_cu13-$version-py3-none-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl
sha=c6e0aaa82dc6e49dc3ddaac465b530e014f48b6c1c6b5ae74fbdd199d824351b
dest=.cache/ucx-cu13
if [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ] && [ -f "$dest/libucx/lib/libucp.so.0" ]; then
  exit 0
fi
mkdir -p .cache/wheels
if ! echo "$sha  .cache/wheels/$wheel" | sha256sum -c --quiet - >/dev/null 2>&1; then
  echo "setup: fetching UCX $version with CUDA from PyPI (libucx-cu13, ~43 MB)"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest .cache/wheels \
    "libucx-cu13==$version"
fi
if ! echo "$sha  .cache/wheels/$wheel" | sha256sum -c --quiet -; then
  echo "error: .cache/wheels/$wheel does not match its expected sha256; delete it and run again" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest"
unzip -q -o ".cache/wheels/$wheel" 'libucx/*' 'libucx_cu13.libs/*' -d "$dest"
echo "$version" >"$dest/VERSION"
echo "setup: UCX $version with CUDA in $dest (libraries in $dest/libucx/lib, modules in lib/ucx)"
