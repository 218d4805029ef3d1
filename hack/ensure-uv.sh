#!/usr/bin/env bash
# Installs the pinned uv into python3 when it is missing or another version. The Makefile calls it
# as `python3 -m uv`, so a differently versioned uv elsewhere on PATH never reads our lock file.
set -euo pipefail
want=0.13.8
have=$(python3 -m uv --version 2>/dev/null | awk '{print $2}' || true)
if [[ "$have" == "$want" ]]; then
  exit 0
fi
echo "installing uv $want from PyPI into $(command -v python3)" >&2
python3 -m pip install --quiet --disable-pip-version-check "uv==$want"
