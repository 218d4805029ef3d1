"""Timestamps as the API server writes them (RFC 3339, UTC, second precision) and as the operator
computes with them (epoch seconds), both ways. Pure."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(epoch: float) -> str:
    """Epoch seconds as a UTC RFC 3339 timestamp with a Z suffix, as Kubernetes writes them."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> float | None:
    """Epoch seconds of an RFC 3339 timestamp, None for None or garbage."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
