"""benchmarks/scale_fabric.py: each stand-in group's rank 0 gets a port no running group holds."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

# The benchmarks import one another by name, as they run: from their own folder.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
scale_fabric = importlib.import_module("scale_fabric")


def test_a_port_a_running_group_holds_is_not_given_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # The kernel may hand out a port again once the probe socket is closed, before rank 0
    # listens on it: the second group must get another.
    offered = iter([41000, 41000, 41000, 41001, 41001, 41002])
    monkeypatch.setattr(scale_fabric, "free_port", lambda: next(offered))
    first = scale_fabric.group_port()
    second = scale_fabric.group_port()
    assert (first, second) == (41000, 41001)
    scale_fabric.release_port(first)
    # Given back, it may be used again.
    monkeypatch.setattr(scale_fabric, "free_port", lambda: 41000)
    assert scale_fabric.group_port() == 41000
    scale_fabric.release_port(41000)
    scale_fabric.release_port(second)
