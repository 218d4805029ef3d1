"""Who gpuval's programs are to a Kubernetes API server: one identity, loaded by the `kubernetes`
package, for kopf's login, the operator's own client and `kubectl gpuval`.

- `load`: a kubeconfig or a pod's ServiceAccount, in kubectl's order (gpuval_credentials.load).
- `Identity`: what was loaded and when to load it again (gpuval_credentials.identity, pure).
- `gpuval_credentials.aio`: the identity as aiohttp sessions (the operator, kopf).
- `gpuval_credentials.sync`: the identity as the package's ApiClient (kubectl gpuval).
"""

from gpuval_credentials.errors import CredentialsError
from gpuval_credentials.identity import Identity
from gpuval_credentials.load import SERVICE_ACCOUNT, load

__all__ = ["SERVICE_ACCOUNT", "CredentialsError", "Identity", "load"]
