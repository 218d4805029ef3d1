"""Cron schedules (croniter ships no type information; this is its one typed doorway)."""

from __future__ import annotations

from datetime import UTC, datetime

from croniter import croniter  # type: ignore[import-untyped]


def is_valid(expression: str) -> bool:
    """True for a 5-field cron expression, or 6 fields with seconds last."""
    return len(expression.split()) in (5, 6) and bool(croniter.is_valid(expression))


def next_tick(expression: str, after: float) -> float:
    """The first time `expression` fires after `after` (epoch seconds, UTC)."""
    base = datetime.fromtimestamp(after, UTC)
    return float(croniter(expression, base).get_next(float))
