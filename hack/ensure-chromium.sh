#!/usr/bin/env bash
# Installs Debian's chromium (the report tests open the HTML report in it, headless) when it is
# missing. Debian's package, never a browser a test tool downloads: this machine reaches Debian's
# mirrors, not a browser vendor's. The .debs are kept under $GPUVAL_CACHE/apt-archives, so a
# fresh machine with a warm cache installs without downloading them again. Needs root the first time.
set -euo pipefail
if [[ -x /usr/bin/chromium ]] && /usr/bin/chromium --version >/dev/null 2>&1; then
  exit 0
fi
cache="${GPUVAL_CACHE:-$HOME/.cache/gpuval}/apt-archives"
mkdir -p "$cache/partial"
if [[ $(id -u) -ne 0 ]]; then
  echo "chromium is missing and installing it needs root: run 'make browser' as root once" >&2
  exit 1
fi
echo "installing Debian's chromium (headless report tests); packages cached in $cache" >&2
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-o "Dir::Cache::Archives=$cache" -o Dpkg::Use-Pty=0 -q)
if ! apt-get "${apt_opts[@]}" install -y --no-install-recommends chromium fonts-dejavu-core \
    >"$cache/install.log" 2>&1; then
  apt-get update -q >>"$cache/install.log" 2>&1
  apt-get "${apt_opts[@]}" install -y --no-install-recommends chromium fonts-dejavu-core \
    >>"$cache/install.log" 2>&1 || { tail -20 "$cache/install.log" >&2; exit 1; }
fi
/usr/bin/chromium --version >&2
