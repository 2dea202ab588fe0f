#!/usr/bin/env bash
# The shared libraries dqserve's binaries need at run time, as Debian/Ubuntu packages, so the
# runtime image installs exactly those (with their dlopen'ed plugins, e.g. UCX's transports)
# instead of a hand-kept list that drifts from the build.
#
#   runtime-libs.sh packages BIN...   print the packages owning the libraries BIN... link to
#   runtime-libs.sh check BIN...      fail if a library of BIN... cannot be found
#
# The build stage of deploy/docker/Dockerfile runs `packages`, the runtime stage `check`;
# tests/e2e/deploy_config_test.sh runs both on the CPU build.
set -euo pipefail

# libcuda.so.1 is the driver's: the NVIDIA container runtime mounts it into the container.
readonly FROM_HOST='^libcuda\.so'

libraries() {
  ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u
}

case "${1:-}" in
  packages)
    shift
    for lib in $(libraries "$@"); do
      # dpkg knows a file by the path its package installed (the real file, /usr/lib after the
      # usr merge); ldd prints the soname link, often under /lib.
      owner=$(dpkg -S "$(realpath "$lib")" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || true)
      if [ -z "$owner" ]; then
        echo "runtime-libs: no package owns $lib; the runtime image would lack it" >&2
        exit 1
      fi
      echo "${owner%%: *}" | tr ',' '\n' | sed 's/^ *//; s/:.*//'
    done | sort -u
    ;;
  check)
    shift
    missing=$(ldd "$@" | awk '/not found/ { print $1 }' | grep -Ev "$FROM_HOST" | sort -u || true)
    if [ -n "$missing" ]; then
      echo "runtime-libs: missing shared libraries:" $missing >&2
      exit 1
    fi
    ;;
  *)
    echo "usage: $0 packages|check BIN..." >&2
    exit 2
    ;;
esac
