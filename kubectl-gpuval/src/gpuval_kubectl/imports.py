"""`kubectl gpuval baseline import FILE`: a file's GpuBaselines applied whole or not at all.

Every document is read and checked first (gpuval_api.baseline.files: at most MAX_DOCUMENTS in
MAX_FILE_BYTES, every field valid), then each is sent to the API server as a dry run
(`dryRun=All`: the server validates and admits it as it would, names it, and stores nothing);
only when every one would be taken are they written. A write that fails after the dry run (the
cluster changed in between) takes back the ones this import wrote. A GPU model gpuval does not
know is taken with a note saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpuval_api.baseline import files
from gpuval_api.crd import GpuBaseline
from gpuval_api.parts import unknown_product_note
from gpuval_kubectl.cluster import Cluster, PluginError

LIMITS = (
    f"at most {files.MAX_DOCUMENTS} GpuBaselines in {files.MAX_FILE_BYTES // (1 << 20)} MiB; "
    "all or none are created"
)


def read(path: Path) -> list[tuple[int, GpuBaseline]]:
    """The file's GpuBaselines, each with its document's number in the file (empty documents
    counted, so the number is where a person finds it)."""
    try:
        return files.read_numbered_file(path)
    except files.BaselineFileError as error:
        raise PluginError(f"{error}; nothing imported") from None


def _label(number: int, baseline: GpuBaseline) -> str:
    return f"document {number} (GpuBaseline {files.excerpt(baseline.metadata.name)})"


def _check(
    cluster: Cluster, found: Sequence[tuple[int, GpuBaseline]], replace: bool, path: Path
) -> None:
    """Every document through the API server's dry run; every refusal named, then raised."""
    refused = []
    for number, baseline in found:
        try:
            cluster.put_baseline(baseline, replace=replace, dry_run=True)
        except PluginError as error:
            refused.append(f"{_label(number, baseline)}: {error}")
    if refused:
        raise PluginError(f"{path}: nothing imported: " + "; ".join(refused))


def _undo(cluster: Cluster, done: Sequence[tuple[GpuBaseline, GpuBaseline | None]]) -> str:
    """Take back what this import wrote: delete what it created, put back what it replaced;
    what could not be taken back, said."""
    left = []
    for baseline, before in reversed(done):
        name = baseline.metadata.name
        try:
            if before is None:
                cluster.delete_baseline(name)
            else:
                cluster.put_baseline(before, replace=True)
        except PluginError as error:
            left.append(f"GpuBaseline {name} stays as imported ({error})")
    return "; ".join(left) if left else "every GpuBaseline it wrote was taken back"


def import_file(cluster: Cluster, path: Path, *, replace: bool) -> str:
    """What `baseline import` prints: each GpuBaseline created or replaced, and a note on each
    of a GPU model gpuval does not know."""
    found = read(path)
    _check(cluster, found, replace, path)
    done: list[tuple[GpuBaseline, GpuBaseline | None]] = []
    lines = []
    for number, baseline in found:
        name = baseline.metadata.name
        try:
            before = cluster.baseline(name) if replace and _exists(cluster, name) else None
            said = cluster.put_baseline(baseline, replace=replace)
        except PluginError as error:
            undone = _undo(cluster, done)
            raise PluginError(
                f"{path}: {_label(number, baseline)}: {error} (after its dry run passed: the "
                f"cluster changed); {undone}"
            ) from None
        done.append((baseline, before))
        note = unknown_product_note(baseline.spec.key.gpu_product)
        lines.append(f"GpuBaseline {name} {said}" + (f" (note: {note})" if note else ""))
    return "\n".join(lines)


def _exists(cluster: Cluster, name: str) -> bool:
    try:
        cluster.baseline(name)
    except PluginError:
        return False
    return True
