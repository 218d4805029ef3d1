#!/usr/bin/env bash
# Installs the pinned uv when it is missing or another version: the lock file is read by uv,
# so every machine must use the same one.
set -euo pipefail
want=0.13.8
if command -v uv >/dev/null 2>&1 && [[ "$(uv --version | awk '{print $2}')" == "$want" ]]; then
  exit 0
fi
echo "installing uv $want from PyPI" >&2
python3 -m pip install --quiet --disable-pip-version-check "uv==$want"
