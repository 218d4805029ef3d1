"""gpuval_operator.kube.credentials against the real API server, for the identities a platform
engineer's kubeconfig holds: an exec credential plugin (here one that hands out the test cluster's
admin client certificate, as a cloud's plugin hands out a token) and a ServiceAccount token in a
tokenFile. Each request is authenticated by the API server as exactly that identity."""

from __future__ import annotations

import asyncio
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuval_devtools.controlplane import Cluster
from gpuval_operator.kube.client import ApiError, KubeClient
from gpuval_operator.kube.credentials import load_credentials
from tests.support.chart import token_for

pytestmark = pytest.mark.cluster

PLUGIN = """#!{python}
import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
cert, key = (open(path).read() for path in sys.argv[1:3])
status = {{"clientCertificateData": cert, "clientKeyData": key}}
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}}))
"""


async def get(kubeconfig: Path, path: str) -> Any:
    async with KubeClient(load_credentials(str(kubeconfig)), max_retries=1) as client:
        return await client.request("GET", path)


def test_an_exec_plugin_kubeconfig_reaches_the_api_server_as_its_identity(
    cluster: Cluster, tmp_path: Path
) -> None:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    user = config["users"][0]["user"]
    plugin = tmp_path / "credential-plugin"
    plugin.write_text(PLUGIN.format(python=sys.executable))
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    config["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(plugin),
            "args": [user["client-certificate"], user["client-key"]],
            "interactiveMode": "Never",
        }
    }
    kubeconfig = tmp_path / "exec.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))

    namespace = asyncio.run(get(kubeconfig, "/api/v1/namespaces/default"))
    assert namespace["metadata"]["name"] == "default"
    # kubectl reads the same file the same way.
    shown = cluster.kubectl_as(kubeconfig, "get", "namespace", "default", "-o", "name")
    assert shown.stdout.strip() == "namespace/default"


def test_a_token_file_kubeconfig_is_that_service_account_and_nothing_more(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    cluster.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    token_file = tmp_path / "token"
    token_file.write_text(token_for(cluster, namespace, "reader"))
    cluster.token_kubeconfig("unused", tmp_path / "token.kubeconfig")
    config = yaml.safe_load((tmp_path / "token.kubeconfig").read_text())
    config["users"][0]["user"] = {"tokenFile": "token"}  # relative to the kubeconfig's folder
    kubeconfig = tmp_path / "token.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))

    with pytest.raises(ApiError) as refused:
        asyncio.run(get(kubeconfig, f"/api/v1/namespaces/{namespace}/secrets"))
    assert refused.value.status == 403
    assert f"system:serviceaccount:{namespace}:reader" in str(refused.value)
