"""Verdicts: of a check, of a node.

A node's verdict is Passed, Failed (evidence against the node: a check failed, the agent hung
after it started, the fabric named it, the node vanished) or NotRun (gpuval could not test it:
its pod stayed unschedulable because work holds the GPUs, was evicted or deleted, its image was
not pulled, its fabric group never formed). Node actions and failure alerts follow Failed only;
which reason falls in which class is the catalogue's (gpuval_api.reasons).
"""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    PASSED = "Passed"
    FAILED = "Failed"
    # A check that did not run; a node is never Skipped.
    SKIPPED = "Skipped"
    # A node gpuval could not test: no evidence against it, so no node action follows.
    NOT_RUN = "NotRun"
