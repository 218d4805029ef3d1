"""`gpuval-agent run --baseline`: this machine's figures against the baseline of its GPU stack
(and in the agent pod, against the GpuBaselines the operator passes in GPUVAL_BASELINE).

The baselines are a file's (`--baseline FILE`, as `kubectl gpuval baseline export` writes it),
then the ones shipped with gpuval (gpuval_api/baseline/shipped: H200, measured with this
project's own benchmark); `--baseline none` turns the rule off. The comparison goes into the
result document (`baseline`: every figure's ratio, "0.98 of the H200 baseline"), and each value
below (1 - fraction) x its centre becomes a BelowBaseline finding of the check that measured it.
The training step's losses are compared with the losses the baseline holds for their experiment
(gpuval_api.training.against_baseline): bit for bit on the same stack, within train.lossTolerance
on another; a difference fails the train check (TrainingMismatch), and `baseline.training` says
how they were compared and why. On one machine this is the only comparison there is.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from gpuval_agent.errors import AgentError
from gpuval_agent.runner import overall
from gpuval_api import REASONS, AgentEnv, Reason, Verdict
from gpuval_api.baseline import files, rules, samples
from gpuval_api.baseline.rules import Below, Candidate
from gpuval_api.baselinemodel import BaselineSettings
from gpuval_api.checks import CheckName
from gpuval_api.gfd import GPU_PRODUCT_LABEL, label_names_product
from gpuval_api.result import AgentResult, CheckResult, Finding, GpuCheckResult
from gpuval_api.training import against_baseline

SHIPPED = "shipped"
NONE = "none"


def candidates(choice: str | None) -> list[Candidate]:
    """The baselines to compare with, in order of preference (see the module docstring)."""
    if choice == NONE:
        return []
    shipped = [(b.metadata.name, b.spec) for b in files.shipped()]
    if choice in (None, SHIPPED):
        return shipped
    try:
        mine = files.read_file(Path(choice))
    except files.BaselineFileError as error:
        raise AgentError(f"--baseline: {error}") from None
    return [(b.metadata.name, b.spec) for b in mine] + shipped


class Given(NamedTuple):
    """What the operator gave the agent pod for the baseline rule: the baselines, the fraction,
    and the GPU model the node's label names ("" without one)."""

    candidates: list[Candidate]
    fraction: float
    labelled: str = ""


def from_env(environ: Mapping[str, str]) -> Given | None:
    """The baselines and fraction the operator gave the agent pod (GPUVAL_BASELINE,
    GPUVAL_BASELINE_FRACTION) and the node's labelled GPU model (GPUVAL_NODE_GPU_PRODUCT); None
    when it gave none of them. Raises ValueError naming the variable."""
    text = environ.get(AgentEnv.BASELINE)
    labelled = environ.get(AgentEnv.NODE_GPU_PRODUCT) or ""
    if not text and not labelled:
        return None
    try:
        found = files.from_yaml(text, AgentEnv.BASELINE) if text else []
    except files.BaselineFileError as error:
        raise ValueError(str(error)) from None
    fraction_text = environ.get(AgentEnv.BASELINE_FRACTION) or str(BaselineSettings().fraction)
    try:
        fraction = BaselineSettings.model_validate({"fraction": fraction_text}).fraction
    except ValidationError as error:
        raise ValueError(
            f"{AgentEnv.BASELINE_FRACTION}={fraction_text!r}: {error.errors()[0]['msg']}"
        ) from None
    return Given([(b.metadata.name, b.spec) for b in found], fraction, labelled)


def label_mismatch(result: AgentResult, labelled: str) -> Finding | None:
    """A GpuProductMismatch finding when the node's GPU model label names another model than
    its GPUs are (NVML's names); None when it names theirs, or there is no label."""
    models = sorted({g.name for g in result.environment.gpus if g.name})
    if not labelled or not models or all(label_names_product(labelled, m) for m in models):
        return None
    node = result.node or result.environment.hostname or "this node"
    message = (
        f"{node}: its {GPU_PRODUCT_LABEL} label says {labelled!r}, its GPUs are "
        f"{', '.join(models)}: it was given the baselines of the label's model"
    )
    return Finding(
        reason=Reason.GPU_PRODUCT_MISMATCH,
        message=message,
        hint=REASONS[Reason.GPU_PRODUCT_MISMATCH].hint,
    )


def _with_finding(check: CheckResult, finding: Finding) -> CheckResult:
    """The check with one more failing finding (failed, naming it, if it passed)."""
    judged = check.model_copy()
    judged.findings = [*check.findings, finding]
    if check.verdict is Verdict.PASSED:
        judged.verdict, judged.reason = Verdict.FAILED, finding.reason
        judged.hint, judged.message = finding.hint, finding.message
    return judged


def _blame(gpu: GpuCheckResult) -> GpuCheckResult:
    blamed = gpu.model_copy()
    blamed.verdict = Verdict.FAILED
    blamed.reason = gpu.reason or Reason.BELOW_BASELINE
    return blamed


def _with_findings(check: CheckResult, below: list[Below]) -> CheckResult:
    """The check with one BelowBaseline finding per value below, failed if it passed."""
    if not below:
        return check
    info = REASONS[Reason.BELOW_BASELINE]
    findings = [
        Finding(
            reason=Reason.BELOW_BASELINE,
            gpu=b.sample.gpu,
            peer=b.sample.peer,
            message=b.message,
            hint=info.hint,
        )
        for b in below
    ]
    blamed = {i for b in below for i in (b.sample.gpu, b.sample.peer) if i is not None}
    judged = check.model_copy()
    judged.findings = [*check.findings, *findings]
    judged.gpus = [_blame(g) if g.index in blamed else g for g in check.gpus]
    if check.verdict is Verdict.PASSED:
        judged.verdict = Verdict.FAILED
        judged.reason = Reason.BELOW_BASELINE
        judged.hint = info.hint
        judged.message = findings[0].message
    return judged


def _training(
    result: AgentResult, baselines: list[Candidate], name: str | None
) -> tuple[str, Finding | None]:
    """How the train check's losses compared with the chosen baseline's, and a TrainingMismatch
    finding when they differ ("" and None without a training record or a baseline)."""
    check = result.check(CheckName.TRAIN)
    if check is None or check.training is None or name is None:
        return "", None
    spec = next(s for n, s in baselines if n == name)
    tolerance = result.checks_config.train.loss_tolerance
    found = against_baseline(check.training, name, spec.training, tolerance)
    if found.mismatch is None:
        return found.how, None
    finding = Finding(
        reason=Reason.TRAINING_MISMATCH,
        message=found.mismatch.message(),
        hint=REASONS[Reason.TRAINING_MISMATCH].hint,
    )
    return found.how, finding


def judge(
    result: AgentResult, baselines: list[Candidate], fraction: float, labelled: str = ""
) -> AgentResult:
    """`result` with its comparison and BelowBaseline findings, verdict and message recomputed;
    with `labelled` (the node's GPU model label), a GpuProductMismatch on the driver check when
    its GPUs are another model. A stopped (partial) run gets the comparison but no findings: it
    is judged as stopped."""
    key, why = samples.node_key(result.environment)
    comparison, below = rules.compare(samples.result_samples(result), key, baselines, fraction, why)
    stopped = result.reason is Reason.AGENT_STOPPED
    mismatch = None if stopped else label_mismatch(result, labelled)
    comparison.training, mismatch_found = _training(result, baselines, comparison.name)
    if stopped:
        below, mismatch_found = [], None
    judged = result.model_copy()
    judged.checks = [
        _with_findings(c, [b for b in below if b.check == c.name]) for c in result.checks
    ]
    if mismatch_found is not None:
        judged.checks = [
            _with_finding(c, mismatch_found) if c.name == CheckName.TRAIN else c
            for c in judged.checks
        ]
    if mismatch is not None:
        judged.checks = [
            _with_finding(c, mismatch) if c.name == CheckName.DRIVER else c for c in judged.checks
        ]
        comparison.note = f"{mismatch.message}; {comparison.note}".rstrip("; ")[:1024]
    judged.baseline = comparison
    judged.verdict, judged.reason, judged.message = overall(
        judged.checks, result.environment.gpu_count, stopped
    )
    return judged
