"""What the local control plane's companions need of the cluster they join: the real node
(gpuval_devtools.realnode, its files in gpuval_devtools.nodeconfig) and Kueue's manager
(gpuval_devtools.kueue). gpuval_devtools.controlplane.Cluster is the one that starts and stops them;
they take it as this, so none of them imports the control plane that imports them."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gpuval_devtools.binaries import Binaries


class ClusterAccess(Protocol):
    """A running local cluster as its companions reach it: its name, its API server and CA, the
    binaries it was built from, and kubectl."""

    name: str
    server: str
    ca_file: Path
    binaries: Binaries

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]: ...

    def apply(self, objects: Sequence[Mapping[str, Any]]) -> None: ...

    def token_kubeconfig(self, token: str, path: Path) -> Path: ...
