"""What a person sees: a live progress line while checks run, and a table at the end."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from gpuval_agent.backends.base import BurnProgress, TelemetrySample
from gpuval_agent.metrics import AgentMetrics
from gpuval_agent.state.model import Reading
from gpuval_api import Reason, Severity, Verdict, verdict_of
from gpuval_api.baselinecomparison import Match
from gpuval_api.figures import BURN, MAX_TEMPERATURE, Better, baseline_judged
from gpuval_api.report import one_line
from gpuval_api.result import AgentResult, CheckResult, GpuCheckResult

_BAR = 24
_VERDICT_LINE = {
    Verdict.PASSED: "PASSED",
    Verdict.FAILED: "FAILED",
    Verdict.NOT_RUN: "NOT TESTED",
    Verdict.SKIPPED: "SKIPPED",
}
# A table line holds one line of a message; the whole text stays in the JSON result document.
TABLE_TEXT = 240


class Display:
    """Reporter for the CLI: a redrawn status line on a terminal, plain lines otherwise."""

    def __init__(
        self, stream: TextIO | None = None, metrics: AgentMetrics | None = None, quiet: bool = False
    ) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.metrics = metrics
        self.quiet = quiet
        self._lock = threading.Lock()
        self._check: str | None = None
        self._expected: float | None = None
        self._fraction: float | None = None
        self._detail = ""
        self._started = time.monotonic()
        self._tflops: dict[int, float] = {}
        self._temperature: dict[int, float] = {}
        self._last_plain = 0.0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.tty and not quiet:
            self._ticker = threading.Thread(target=self._tick, name="display", daemon=True)
            self._ticker.start()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=1)
        self._clear()

    def _tick(self) -> None:
        while not self._stop.wait(0.25):
            self._draw()

    def _line(self) -> str:
        elapsed = time.monotonic() - self._started
        fraction = self._fraction
        if self._expected:
            fraction = min(elapsed / self._expected, 1.0)
        bar = ""
        if fraction is not None:
            filled = int(fraction * _BAR)
            bar = f" [{'#' * filled}{'.' * (_BAR - filled)}] {fraction:4.0%}"
        gpus = " ".join(
            f"gpu{g}:{self._tflops[g]:.0f}TF"
            + (f"/{self._temperature[g]:.0f}C" if g in self._temperature else "")
            for g in sorted(self._tflops)
        )
        return f"{self._check} {elapsed:5.1f}s{bar} {self._detail} {gpus}".rstrip()

    def _draw(self) -> None:
        with self._lock:
            if self._check is None:
                return
            line = self._line()
            self.stream.write("\r\x1b[2K" + line[:160])
            self.stream.flush()

    def _clear(self) -> None:
        if self.tty and not self.quiet:
            with self._lock:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()

    def _plain(self, text: str) -> None:
        if self.quiet:
            return
        with self._lock:
            if self.tty:
                self.stream.write("\r\x1b[2K")
            self.stream.write(text + "\n")
            self.stream.flush()

    # Reporter
    def check_started(self, name: str, expected_seconds: float | None) -> None:
        with self._lock:
            self._check, self._expected, self._fraction = name, expected_seconds, None
            self._detail, self._started = "", time.monotonic()
            self._tflops.clear()
        if self.metrics is not None:
            self.metrics.check_started(name)
        if not self.tty:
            self._plain(f"gpuval: {name} started")

    def check_progress(self, name: str, fraction: float | None, detail: str) -> None:
        with self._lock:
            self._fraction, self._detail = fraction, detail
        if not self.tty and detail:
            self._plain(f"gpuval: {name}: {detail}")

    def burn_progress(self, progress: BurnProgress) -> None:
        with self._lock:
            self._tflops[progress.gpu] = progress.tflops
        if self.metrics is not None:
            self.metrics.burn_progress(progress)
        now = time.monotonic()
        if not self.tty and now - self._last_plain >= 10:
            self._last_plain = now
            with self._lock:
                line = self._line()
            self._plain(f"gpuval: {line}")

    def samples(self, samples: list[TelemetrySample]) -> None:
        with self._lock:
            for sample in samples:
                if sample.temperature_celsius is not None:
                    self._temperature[sample.gpu] = sample.temperature_celsius
        if self.metrics is not None:
            self.metrics.samples(samples)

    def state_reading(self, reading: Reading) -> None:
        """A state reading (the state check's, and one after each load check)."""
        if self.metrics is not None:
            self.metrics.state(reading)

    def check_finished(self, result: CheckResult) -> None:
        if self.metrics is not None:
            self.metrics.check_finished(result)
        with self._lock:
            self._check = None
        self._plain(
            f"gpuval: {result.name} {result.verdict.value.lower()} in "
            f"{result.elapsed_seconds:.1f}s: {result.message}"
        )


def render_table(result: AgentResult) -> str:
    """The end-of-run table: one row per check, then every finding with its hint."""
    environment = result.environment
    gpu = environment.gpus[0].name if environment.gpus else "no GPU"
    lines = [
        f"gpuval-agent {result.agent_version} on {environment.hostname or '?'} "
        f"({result.backend} backend): {environment.gpu_count} x {gpu}, driver "
        f"{environment.driver_version or '?'}, CUDA driver {environment.cuda_driver_version or '?'}"
        f" / runtime {environment.cuda_runtime_version or '?'}, NCCL "
        f"{environment.nccl_version or '?'}",
        "",
        f"{'CHECK':<10} {'VERDICT':<8} {'SECONDS':>8}  RESULT",
    ]
    for check in result.checks:
        lines.append(
            f"{check.name:<10} {check.verdict.value:<8} {check.elapsed_seconds:>8.1f}  "
            f"{one_line(check.message, TABLE_TEXT)}"
        )
    burn = result.check("burn")
    if burn is not None and burn.gpus:
        lines += ["", f"{'GPU':<4} {'TFLOP/s':>9} {'MAX C':>6} {'MAX W':>6} {'MIN MHz':>8}  UUID"]
        lines += [_gpu_row(g, burn, result) for g in burn.gpus]
    nccl = result.check("nccl")
    if nccl is not None and nccl.nccl_sizes:
        lines += ["", f"{'BYTES':>12} {'ALGBW GB/s':>11} {'BUSBW GB/s':>11}"]
        for size in nccl.nccl_sizes:
            lines.append(f"{size.bytes:>12} {size.algbw_gbps:>11.1f} {size.busbw_gbps:>11.1f}")
    not_read = [(c.name, what) for c in result.checks for what in c.not_read]
    if not_read:
        lines.append("")
        lines.extend(f"NOT READ {name}: {one_line(what, TABLE_TEXT)}" for name, what in not_read)
    lines += baseline_lines(result)
    findings = [(c.name, f) for c in result.checks for f in c.findings]
    if findings:
        lines.append("")
        for name, finding in findings:
            label = "FAIL" if finding.severity is Severity.ERROR else "WARN"
            if finding.reason is Reason.CHECK_SKIPPED:
                label = "SKIP"
            elif verdict_of(finding.reason) is Verdict.NOT_RUN:
                label = "BUSY" if finding.reason is Reason.GPU_IN_USE else "UNTESTED"
            text = one_line(finding.message, TABLE_TEXT)
            lines.append(f"{label} {name}: {finding.reason.value}: {text}")
            if label != "SKIP":
                lines.append(f"     hint: {finding.hint}")
    lines += ["", f"{_VERDICT_LINE[result.verdict]}: {one_line(result.message, TABLE_TEXT)}"]
    return "\n".join(lines)


# The burn row's figures: result key, column width, format.
_GPU_FIGURES: tuple[tuple[str, int, str], ...] = (
    (BURN.metric, 9, ".1f"),
    (MAX_TEMPERATURE.metric, 6, ".0f"),
    ("maxPowerWatts", 6, ".0f"),
    ("minSmClockMhz", 8, ".0f"),
)
_GPU_FIGURES_WIDTH = sum(width + 1 for _, width, _ in _GPU_FIGURES) - 1


def _gpu_row(gpu: GpuCheckResult, burn: CheckResult, result: AgentResult) -> str:
    """One GPU's burn row. A GPU the burn did not test (in use, or skipped: no burn figure
    and no failure) says so instead of figures, since what a sensor read while another
    process used it is not a burn figure; a figure that was not measured is '-', never 0."""
    uuid = gpu.uuid or next(
        (g.uuid or "" for g in result.environment.gpus if g.index == gpu.index), ""
    )
    untested = gpu.verdict is Verdict.NOT_RUN or (
        gpu.verdict is not Verdict.FAILED and BURN.metric not in gpu.metrics
    )
    if untested:
        reason = gpu.reason or next((f.reason for f in burn.findings if f.gpu == gpu.index), None)
        why = f"not tested ({reason})" if reason else "not tested"
        return f"{gpu.index:<4} {why:<{_GPU_FIGURES_WIDTH}}  {uuid}".rstrip()
    cells = [
        f"{gpu.metrics[key]:>{width}{spec}}" if key in gpu.metrics else f"{'-':>{width}}"
        for key, width, spec in _GPU_FIGURES
    ]
    return f"{gpu.index:<4} {' '.join(cells)}  {uuid}".rstrip()


def baseline_lines(result: AgentResult) -> list[str]:
    """The figures against the baseline: worst value, centre, ratio ('0.98 of the H200
    baseline'); NCCL below 1 GiB is left to the JSON (kept there, not judged)."""
    comparison = result.baseline
    if comparison is None:
        return []
    if comparison.name is None:
        return ["", f"BASELINE: {comparison.note}"]
    scope = " (per-GPU figures only)" if comparison.match is Match.GPU else ""
    of = comparison.key.describe() if comparison.key else ""
    mine = comparison.node_key.describe() if comparison.node_key else "?"
    head = ["", f"BASELINE {comparison.name}: {of}; this machine: {mine}{scope}"]
    if comparison.training:
        head.append(f"training losses: {comparison.training}")
    judged = [entry for entry in comparison.figures if baseline_judged(entry.figure)]
    if not judged:
        return [*head, "nothing was measured to compare with it (no GPU was tested)"]
    lines = [
        *head,
        f"BelowBaseline: a value below {1 - comparison.fraction:.2f} x the baseline's centre "
        f"(where lower is better, above {1 + comparison.fraction:.2f} x it plus a tolerance)",
        f"{'FIGURE':<12} {'WORST':>9} {'BASELINE':>9}  RATIO",
    ]
    for entry in judged:
        centre = f"{entry.centre:.1f}" if entry.centre is not None else "-"
        if entry.ratio is None:
            said = entry.note
        else:
            said = comparison.phrase(entry.ratio) + (f" ({entry.where})" if entry.where else "")
            if entry.better is Better.LOWER and entry.ceiling is not None:
                said = f"at most {entry.ceiling:.1f}" + (f" ({entry.where})" if entry.where else "")
            if entry.below:
                side = "above" if entry.better is Better.LOWER else "below"
                said += f": {entry.below} {side}"
        lines.append(f"{entry.figure:<12} {entry.value:>9.1f} {centre:>9}  {said}")
    return lines
