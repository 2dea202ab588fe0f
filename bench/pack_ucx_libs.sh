#!/usr/bin/env bash
# Packs UCX built with CUDA (the libucx-cu13 wheel's UCX 1.22, fetched by
# scripts/fetch-ucx-cuda.sh) into a folder that travels to the GPU machine with the binaries, and
# writes the env.sh that makes the binaries load it there instead of Debian's UCX 1.13 (which
# ../shared/gpu/pack-libs.sh puts in .gpu/libs and which has no CUDA). Stripped: about 5 MB.
#   usage: bench/pack_ucx_libs.sh [OUT_DIR]      (default .gpu/ucx-cu13; keep it git-ignored)
# On the GPU machine, after the exports of ../shared/gpu/README.md (LD_LIBRARY_PATH with
# .gpu/libs, UCX_MODULE_DIR), from the repository root:
#   source .gpu/ucx-cu13/env.sh
#   .gpu/ucx-cu13/libucx/bin/ucx_info -v         # UCX 1.22.0
#   .gpu/ucx-cu13/libucx/bin/ucx_info -d | grep -E 'Transport|Memory domain'   # cuda_copy, cuda_ipc
# The layout of the wheel is kept (libucx/lib, libucx/lib/ucx, libucx_cu13.libs): UCX finds its
# modules in lib/ucx next to libucs, and libucm_cuda finds the wheel's cudart by its RPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.gpu/ucx-cu13}
scripts/fetch-ucx-cuda.sh
src=.cache/ucx-cu13
rm -rf "$out"
mkdir -p "$out/libucx/lib/ucx" "$out/libucx/bin" "$out/libucx_cu13.libs"
# The runtime: libucp/libuct/libucs/libucm (+ libucs_signal), the cuda and cma transport modules
# and the CUDA memory hooks; not the perftest module (it alone needs libgomp, and 10 MB).
for lib in libucp libuct libucs libucm libucs_signal; do
  cp -L "$src/libucx/lib/$lib.so.0" "$out/libucx/lib/"
done
for mod in libuct_cuda libucm_cuda libuct_cma; do
  cp -L "$src/libucx/lib/ucx/$mod.so.0" "$out/libucx/lib/ucx/"
done
cp -L "$src"/libucx_cu13.libs/libcudart-*.so.* "$out/libucx_cu13.libs/"
cp -L "$src/libucx/bin/ucx_info" "$out/libucx/bin/"
find "$out" -type f -name '*.so*' -exec strip --strip-unneeded {} +
strip --strip-unneeded "$out/libucx/bin/ucx_info"
cat >"$out/env.sh" <<'ENV'
# Source this (bash) on the GPU machine after the exports for .gpu/libs: binaries then load UCX
# 1.22 with CUDA from here instead of Debian's UCX 1.13 (the ucx transport logs which UCX it
# loaded, and refuses one older than it was built against).
ucx_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH=$ucx_here/libucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export UCX_MODULE_DIR=$ucx_here/libucx/lib/ucx
# GPU to GPU inside a node: cuda_ipc (NVLink / P2P), cuda_copy for staging, and tcp for wireup
# and peer-failure detection (the transport requires peer error handling, which UCX's shared
# memory transports lack). Override before sourcing to experiment.
export UCX_TLS=${UCX_TLS:-cuda_copy,cuda_ipc,sm,self,tcp}
unset ucx_here
ENV
du -sh "$out"
echo "pack_ucx_libs: on the GPU machine, from the repository root: source $out/env.sh"
