"""The operator's Kubernetes client, and its public face: what code outside the operator (the pod
runner, the benchmarks, the tests) may use to reach the API server the operator's way.

- `load_credentials`: the operator's `Login` (a kubeconfig, or in a pod the ServiceAccount, loaded
  by gpuval_credentials and loaded again when due or refused), for `KubeClient` (kube.credentials).
- `KubeClient`: raw-JSON requests with retries on 429/5xx, paginated lists, resumable watches
  (kube.client), with `ApiError`, `ResourceExpiredError` and `q` (a quoted path segment).
- `Follower`: one label-selected list+watch handed to callbacks, resumed and relisted
  (kube.follower).

Inside the wing, and for the operator alone: Events (kube.events) and leader election over a
Lease (kube.leader). Anything not named here is the operator's own and may change.
"""

from gpuval_operator.kube.client import ApiError, KubeClient, ResourceExpiredError, q
from gpuval_operator.kube.credentials import (
    Credentials,
    CredentialsError,
    Login,
    load_credentials,
)
from gpuval_operator.kube.follower import Follower

__all__ = [
    "ApiError",
    "Credentials",
    "CredentialsError",
    "Follower",
    "KubeClient",
    "Login",
    "ResourceExpiredError",
    "load_credentials",
    "q",
]
