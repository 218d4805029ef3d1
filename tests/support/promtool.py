"""Debian's promtool (the binary the alert tests run) and its `test rules` runner."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from gpuval_devtools.controlplane import debian_binary


def promtool_binary() -> Path:
    return debian_binary("promtool", ["promtool"], log=lambda _message: None)["promtool"]


def run_rule_tests(
    promtool: Path, rule_files: list[Path], cases: list[dict[str, Any]], path: Path
) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` over `cases` (the test file's `tests`, evaluated every minute)
    against `rule_files`; the test file is written to `path`."""
    tests = {
        "rule_files": [str(f) for f in rule_files],
        "evaluation_interval": "1m",
        "tests": cases,
    }
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    return subprocess.run(
        [str(promtool), "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
