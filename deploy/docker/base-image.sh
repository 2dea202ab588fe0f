#!/usr/bin/env bash
# The Debian base image for machines that cannot pull one from a registry (docs/deploy.md,
# "Without a registry"): `debootstrap --variant=minbase` of a Debian suite from this machine's
# configured mirror, imported with `docker import`. deploy/docker/Dockerfile takes it as its
# BASE_BUILD / BASE_RUNTIME build arguments.
#
#   deploy/docker/base-image.sh [SUITE]      (default bookworm) prints the image's name
#
# The image is named dqserve-base:SUITE-<tag>, the tag a hash of what makes it (this script, the
# suite, the mirrors): an image with that name is reused, so a second run costs a second. Set
# DQ_BASE_REBUILD=1 to make it again (e.g. to pick up the mirror's security updates).
# Mirrors: DQ_DEBIAN_MIRROR / DQ_DEBIAN_SECURITY, else the deb.debian.org-style entries of
# /etc/apt/sources.list{,.d/*} (one-line and deb822 formats), else deb.debian.org. Needs root
# (debootstrap) and a running Docker engine. Progress goes to stderr, the name to stdout.
set -euo pipefail
suite=${1:-bookworm}
here=$(cd "$(dirname "$0")" && pwd)

# "URI SUITE" for every apt source of this machine, one per line.
apt_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && awk '$1 == "deb" { u = $2; if (u ~ /^\[/) u = $3; for (i = 3; i <= NF; i++)
      if ($i !~ /^\[/ && $i != u) { print u, $i; break } }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && awk 'BEGIN { RS = ""; FS = "\n" } {
      uris = ""; suites = ""; deb = 0
      for (i = 1; i <= NF; i++) {
        if ($i ~ /^Types:.*[[:space:]]deb([[:space:]]|$)/) deb = 1
        if ($i ~ /^URIs:/) { uris = $i; sub(/^URIs:[[:space:]]*/, "", uris) }
        if ($i ~ /^Suites:/) { suites = $i; sub(/^Suites:[[:space:]]*/, "", suites) }
      }
      if (deb) { n = split(uris, u, " "); m = split(suites, s, " ")
        for (a = 1; a <= n; a++) for (b = 1; b <= m; b++) print u[a], s[b] } }' "$f"
  done
}

mirror_for() {  # mirror_for SUITE: the URI serving exactly that suite, or ""
  apt_sources | awk -v s="$1" '$2 == s { print $1; exit }'
}

mirror=${DQ_DEBIAN_MIRROR:-$(mirror_for "$suite")}
mirror=${mirror:-http://deb.debian.org/debian}
security=${DQ_DEBIAN_SECURITY:-$(mirror_for "$suite-security")}
security=${security:-http://deb.debian.org/debian-security}

tag=$( (cat "$0"; echo "$suite $mirror $security") | sha256sum | cut -c1-12)
image=dqserve-base:$suite-$tag
if [ "${DQ_BASE_REBUILD:-0}" != 1 ] && docker image inspect "$image" >/dev/null 2>&1; then
  echo "base-image: $image exists (cached)" >&2
  echo "$image"
  exit 0
fi
command -v debootstrap >/dev/null || {
  echo "base-image: debootstrap is not installed (scripts/setup.sh installs it)" >&2
  exit 1
}

root=$(mktemp -d /var/tmp/dqserve-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
start=$(date +%s)
echo "base-image: debootstrap --variant=minbase $suite from $mirror" >&2
debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.log" 2>&1 || {
  tail -20 "$root.log" >&2
  rm -f "$root.log"
  exit 1
}
rm -f "$root.log"
# The image's apt sees the same suites as this machine: the release, its updates and security,
# so packages installed into it match the versions the binaries were built against.
cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
EOF
# Containers are throwaway: no docs or man pages from later installs; lists fetched on demand.
cat >"$root/etc/dpkg/dpkg.cfg.d/01-dqserve-nodoc" <<'EOF'
path-exclude /usr/share/doc/*
path-exclude /usr/share/man/*
path-exclude /usr/share/locale/*
EOF
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb "$root"/tmp/*
tar -C "$root" --numeric-owner -c . |
  docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' --message "debootstrap --variant=minbase $suite $mirror" \
    - "$image" >/dev/null
echo "base-image: $image made in $(($(date +%s) - start)) s ($here/base-image.sh)" >&2
echo "$image"
