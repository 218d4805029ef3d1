"""Kueue (sigs.k8s.io/kueue) on the local control plane, for the tests of gpuval's use of it.

build: the manager built from Kueue's Go module and its manifests rendered from the module's own
``config/``, cached; manifests: what the cluster gets of them and how the manager is configured
(pure); certs: its webhook certificate; manager: the running manager (``Cluster.start_kueue``)
and the queues tests make. docs/kueue.md tells the whole set-up.
"""

from gpuval_devtools.kueue.build import KUEUE_VERSION, KueueBuild, build
from gpuval_devtools.kueue.manager import Kueue, KueueQueue
from gpuval_devtools.kueue.manifests import MANAGED_NAMESPACE_LABEL

__all__ = [
    "KUEUE_VERSION",
    "MANAGED_NAMESPACE_LABEL",
    "Kueue",
    "KueueBuild",
    "KueueQueue",
    "build",
]
