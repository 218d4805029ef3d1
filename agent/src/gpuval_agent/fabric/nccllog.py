"""The NCCL log a fabric result keeps as evidence: a bounded excerpt of the ranks' output. Pure.

A fabric run's rank processes print thousands of NCCL_DEBUG=INFO lines (one per channel and peer of
every communicator). What a person needs of them, and what a fabric-failed node's evidence bundle
holds (the operator builds it, gpuval_api.fabric.evidence, and may fail a node its agent passed, so
the excerpt is kept on every run):

- every warning or error line (`NCCL WARN`, an error, a failure, a timeout, a traceback) with
  CONTEXT lines before and after it: what NCCL said around the failure;
- the set-up lines that say what NCCL chose: its version, the network and the interfaces or HCAs
  it uses, one line per distinct `via ...` transport, communicator init and its completion.

Bounded: each line cut to LINE_CHARS; the whole at most CLEAN_CHARS when every phase went well,
TROUBLED_CHARS when one did not; warnings and errors first, then their context, then the set-up
lines, each log in turn, the rest counted in a `[... N lines left out]` marker. The rank processes'
very last words stay in the result's `logTail` (only when a phase failed).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

CONTEXT = 3
LINE_CHARS = 240
CLEAN_CHARS = 4 * 1024
TROUBLED_CHARS = 12 * 1024

_PROBLEM = re.compile(
    r"NCCL WARN|\berror|\bfail|\btimed? ?out\b|traceback|\babort|\bhang\b|\bhung\b|never ends|"
    r"refused|unreachable",
    re.IGNORECASE,
)
_SETUP = re.compile(
    r"NCCL version|NET/|Using network|Using \[|NCCL_SOCKET_IFNAME|NCCL_IB_HCA|Init COMPLETE|"
    r"nRanks|Bootstrap"
)
_VIA = re.compile(r"via \S+")
_PROBLEM_TIER, _CONTEXT_TIER, _SETUP_TIER = 0, 1, 2
# Room for a "[... N lines left out]" marker: one may precede each kept line, one end a log.
_MARKER = 32


def _short(line: str) -> str:
    text = line.rstrip()
    return text if len(text) <= LINE_CHARS else text[: LINE_CHARS - 1] + "…"


def _tiers(lines: Sequence[str]) -> dict[int, int]:
    """Line index -> its tier (lower is kept first)."""
    chosen: dict[int, int] = {}
    seen_via: set[str] = set()
    for index, line in enumerate(lines):
        if _PROBLEM.search(line):
            chosen[index] = _PROBLEM_TIER
            for near in range(max(0, index - CONTEXT), min(len(lines), index + CONTEXT + 1)):
                chosen.setdefault(near, _CONTEXT_TIER)
            continue
        via = _VIA.search(line)
        if via is not None:
            if via.group(0) not in seen_via:
                seen_via.add(via.group(0))
                chosen.setdefault(index, _SETUP_TIER)
        elif _SETUP.search(line):
            chosen.setdefault(index, _SETUP_TIER)
    return chosen


def excerpt(logs: Sequence[tuple[str, Sequence[str]]], troubled: bool) -> str | None:
    """The kept lines of the ranks' logs (`(name, lines)` each), or None when none is kept."""
    limit = TROUBLED_CHARS if troubled else CLEAN_CHARS
    tiers = [_tiers(lines) for _, lines in logs]
    kept: list[set[int]] = [set() for _ in logs]
    used = sum(len(f"--- {name} ---\n") + _MARKER for name, _ in logs)
    for tier in (_PROBLEM_TIER, _CONTEXT_TIER, _SETUP_TIER):
        for (_, lines), chosen, keep in zip(logs, tiers, kept, strict=True):
            for index in sorted(i for i, t in chosen.items() if t == tier):
                cost = len(_short(lines[index])) + 1 + _MARKER
                if used + cost > limit:
                    break
                keep.add(index)
                used += cost
    parts: list[str] = []
    for (name, lines), keep in zip(logs, kept, strict=True):
        if not keep:
            continue
        parts.append(f"--- {name} ---")
        previous = -1
        for index in sorted(keep):
            if index > previous + 1:
                parts.append(f"[... {index - previous - 1} lines left out]")
            parts.append(_short(lines[index]))
            previous = index
        if previous < len(lines) - 1:
            parts.append(f"[... {len(lines) - 1 - previous} lines left out]")
    return "\n".join(parts) or None
