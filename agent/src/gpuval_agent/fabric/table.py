"""The fabric result as a person reads it at a terminal. Pure."""

from __future__ import annotations

from gpuval_api import REASONS, Verdict
from gpuval_api.fabric import FabricResult

_NCCL_SHOWN = 12


def _header(result: FabricResult) -> list[str]:
    gpus = f"{result.gpus_per_node} GPU{'s' if result.gpus_per_node != 1 else ''} per node"
    lines = [
        f"gpuval-agent {result.agent_version} fabric ({result.backend} backend): group "
        f"{result.group}, node {result.node} = rank {result.rank} of {len(result.nodes)}, {gpus}",
        f"nodes: {', '.join(result.nodes)}",
        f"transport: {result.transport}",
    ]
    lines += [f"  {line}" for line in result.transport_lines]
    shown = [f"{k}={v}" for k, v in list(result.nccl_env.items())[:_NCCL_SHOWN]]
    if shown:
        lines.append("NCCL: " + " ".join(shown))
    return lines


def _sizes(result: FabricResult) -> list[str]:
    if not result.sizes:
        return []
    lines = ["", f"{'BYTES':>12}  {'ALGBW GB/s':>10}  {'BUSBW GB/s':>10}"]
    lines += [f"{s.bytes:>12}  {s.algbw_gbps:>10.2f}  {s.busbw_gbps:>10.2f}" for s in result.sizes]
    return lines


def _pairs(result: FabricResult) -> list[str]:
    if not result.pairs:
        return []
    width = max(len(f"{p.a} - {p.b}") for p in result.pairs)
    lines = ["", f"{'ROUND':<13}  {'PAIR':<{width}}  {'BUSBW GB/s':>10}"]
    for pair in result.pairs:
        label = "confirmation" if pair.round == 0 else str(pair.round)
        figure = f"{pair.busbw_gbps:>10.2f}" if pair.busbw_gbps is not None else "    failed"
        line = f"{label:<13}  {f'{pair.a} - {pair.b}':<{width}}  {figure}"
        if pair.error:
            line += f"  {pair.error[:160]}"
        lines.append(line)
    return lines


def _training(result: FabricResult) -> list[str]:
    train = result.train
    if train is None:
        return []
    lines = ["", f"TRAINING ({train.model}, {train.gpus} GPUs across {train.nodes} nodes)"]
    figure = train.figure
    if figure is not None and train.tokens_per_second is not None:
        steps = ""
        if train.step_median_seconds is not None and train.step_p99_seconds is not None:
            median, p99 = train.step_median_seconds * 1e3, train.step_p99_seconds * 1e3
            steps = f", step {median:.3g} ms median / {p99:.3g} ms p99"
        lines.append(
            f"  group: {train.tokens_per_second:,.0f} tokens/s ({figure:,.0f} per GPU){steps}"
        )
    elif train.error:
        lines.append(f"  group: failed: {train.error[:160]}")
    if train.record is not None:
        lines.append(f"  losses: {len(train.record.losses)} steps, digest {train.record.digest}")
    if train.pairs:
        width = max(len(f"{p.a} - {p.b}") for p in train.pairs)
        lines.append(f"  {'ROUND':<13}  {'PAIR':<{width}}  {'TOKENS/S PER GPU':>16}")
        for pair in train.pairs:
            label = "confirmation" if pair.round == 0 else str(pair.round)
            shown = f"{pair.figure:>16,.0f}" if pair.figure is not None else f"{'failed':>16}"
            line = f"  {label:<13}  {f'{pair.a} - {pair.b}':<{width}}  {shown}"
            if pair.error:
                line += f"  {pair.error[:160]}"
            lines.append(line)
    return lines


def render_fabric(result: FabricResult) -> str:
    lines = _header(result) + _sizes(result) + _pairs(result) + _training(result) + [""]
    if result.verdict is Verdict.PASSED:
        lines.append(f"PASSED: {result.message}")
    else:
        label = "FAIL" if result.verdict is Verdict.FAILED else "NOT RUN"
        lines.append(f"{label} {result.reason or ''}: {result.message}")
        if result.reason is not None:
            lines.append(f"  hint: {REASONS[result.reason].hint}")
    return "\n".join(lines)
