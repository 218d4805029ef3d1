"""One identity for the operator's client, kopf's login and kubectl gpuval (gpuval_credentials,
loaded by the kubernetes package) against the real API server, for what a platform engineer's
kubeconfig holds: an exec credential plugin (one handing out the admin client certificate, as a
cloud's plugin hands out a token, and one issuing ServiceAccount tokens that really expire), a
token file, impersonation and a proxy. Each request is authenticated by the API server as
exactly that identity; an expiring token is replaced before it dies and a refused one (401)
makes each client log in again; the operator runs a whole validation past its tokens' expiry."""

from __future__ import annotations

import asyncio
import re
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes import client as k8s

from gpuval_devtools.controlplane import Cluster, free_port
from gpuval_devtools.launch import operator_process
from gpuval_kubectl.cluster import Cluster as Objects
from gpuval_kubectl.cluster import connect
from gpuval_operator.kube.client import ApiError, KubeClient
from gpuval_operator.kube.credentials import Login, kopf_context, load_credentials
from tests.support.chart import token_for
from tests.support.fleet import Fleet, apply, delete_validation, scrape, status_of
from tests.support.kube import get_json, wait_for
from tests.support.proxies import connect_proxy, host_port
from tests.support.tokenplugin import Reaper, TokenPlugin, token_plugin

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("install_crds")]

LIFE = 20.0  # seconds an expiring token lives (the API server's own tokens live 10 minutes)
REVIEW = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"

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


def _reader(cluster: Cluster, namespace: str, account: str) -> None:
    """A ServiceAccount that may read (the `view` role) its own namespace and nothing else."""
    cluster.kubectl("create", "serviceaccount", account, "-n", namespace)
    cluster.kubectl(
        "create",
        "rolebinding",
        f"{account}-view",
        "--clusterrole=view",
        f"--serviceaccount={namespace}:{account}",
        "-n",
        namespace,
    )


def test_an_exec_plugins_token_is_replaced_before_it_expires_and_really_dies_after(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """The operator's client reads for three token lifetimes: the plugin runs again before each
    token's expirationTimestamp (the reaper then kills it on the API server), no request is
    refused, and the first token is refused once it has expired."""
    _reader(cluster, namespace, "exec-user")
    plugin = token_plugin(cluster, namespace, "exec-user", tmp_path / "plugin", life=LIFE)
    kubeconfig = plugin.kubeconfig(tmp_path / "exec.kubeconfig")
    path = f"/api/v1/namespaces/{namespace}/configmaps"

    async def read_for(seconds: float) -> tuple[int, dict[tuple[str, int], int], int]:
        answers = 0
        async with KubeClient(load_credentials(str(kubeconfig)), max_retries=1) as client:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                assert (await client.get(path))["kind"] == "ConfigMapList"
                answers += 1
                await asyncio.sleep(1)
            return answers, client.requests_total, client.login.loads

    with Reaper(plugin) as reaper:
        answers, requests, loads = asyncio.run(read_for(3 * LIFE))
    runs = plugin.runs()
    assert len(reaper.reaped) >= 2, "tokens died while the client read on"
    assert loads == len(runs) >= 3
    assert requests.get(("GET", 401), 0) == 0, "every token was replaced before it expired"
    assert answers == requests[("GET", 200)]
    dead = cluster.token_kubeconfig(runs[0]["token"], tmp_path / "dead.kubeconfig")
    wait_for(
        "the first token to be refused",
        lambda: (
            "Unauthorized" in cluster.kubectl_as(dead, "get", "configmaps", "-n", namespace).stderr
        ),
        timeout=30,
    )


def _renewed_after_revoking(plugin: TokenPlugin, read: Callable[[], object]) -> None:
    """Revokes the plugin's latest token and reads until the client has run the plugin again
    (the API server's authentication cache may accept a revoked token for a few seconds); every
    read succeeds."""
    before = len(plugin.runs())
    plugin.revoke(plugin.runs()[-1])
    deadline = time.monotonic() + 60
    while len(plugin.runs()) == before and time.monotonic() < deadline:
        read()
        time.sleep(0.5)
    assert len(plugin.runs()) == before + 1


def test_a_revoked_token_makes_the_operators_client_and_kubectl_gpuval_log_in_again(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """A plugin that says no expiry (its token is kept until the API server refuses it): the
    401 runs the plugin again and the request is repeated, for both clients."""
    _reader(cluster, namespace, "revoked-user")
    plugin = token_plugin(cluster, namespace, "revoked-user", tmp_path / "plugin", life=0)
    kubeconfig = plugin.kubeconfig(tmp_path / "exec.kubeconfig")
    path = f"/api/v1/namespaces/{namespace}/configmaps"

    async def main() -> tuple[dict[tuple[str, int], int], int]:
        async with KubeClient(load_credentials(str(kubeconfig)), max_retries=1) as client:
            loop = asyncio.get_running_loop()

            def read() -> object:
                return asyncio.run_coroutine_threadsafe(client.get(path), loop).result(30)

            await client.get(path)
            await asyncio.to_thread(_renewed_after_revoking, plugin, read)
            await client.get(path)
            return client.requests_total, client.login.loads

    requests, loads = asyncio.run(main())
    assert requests[("GET", 401)] == 1 and loads == 2 == len(plugin.runs())

    with connect(str(kubeconfig)) as login:
        objects = Objects(login)
        assert objects.missing() == []
        _renewed_after_revoking(plugin, objects.missing)
        assert objects.missing() == []
    assert len(plugin.runs()) == 4


def test_the_kubeconfigs_impersonation_is_honoured_by_all_three_clients(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """The admin's kubeconfig acting as a ServiceAccount (`as`, `as-uid`, `as-groups`,
    `as-user-extra`): the API server reviews each client as that user, and the operator's client
    is refused what the ServiceAccount may not do."""
    cluster.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    user = f"system:serviceaccount:{namespace}:reader"
    config["users"][0]["user"].update(
        {
            "as": user,
            "as-uid": "4242",
            "as-groups": ["system:serviceaccounts", "gpuval:testers"],
            "as-user-extra": {"example.org/team": ["gpu", "infra"]},
        }
    )
    kubeconfig = tmp_path / "as.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))

    async def operator_and_kopf() -> tuple[Any, ApiError, Any]:
        login = load_credentials(str(kubeconfig))
        async with KubeClient(login, max_retries=1) as own:
            reviewed = await own.create(REVIEWS, REVIEW)
            with pytest.raises(ApiError) as denied:
                await own.get(f"/api/v1/namespaces/{namespace}/secrets")
        given = kopf_context(login.identity)
        async with (
            given.aiohttp_session as session,
            session.post(given.server + REVIEWS, json=REVIEW) as answer,
        ):
            by_kopf = await answer.json()
        return reviewed, denied.value, by_kopf

    reviewed, denied, by_kopf = asyncio.run(operator_and_kopf())
    with connect(str(kubeconfig)) as login:
        answer = k8s.AuthenticationV1Api(login.api).create_self_subject_review(REVIEW)
        by_plugin = login.api.sanitize_for_serialization(answer)

    for review in (reviewed, by_kopf, by_plugin):
        info = review["status"]["userInfo"]
        assert info["username"] == user and info["uid"] == "4242"
        assert {"system:serviceaccounts", "gpuval:testers"} <= set(info["groups"])
        assert info["extra"] == {"example.org/team": ["gpu", "infra"]}
    assert denied.status == 403 and user in str(denied)


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_a_proxy_in_the_kubeconfig_or_the_environment_carries_every_clients_connections(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """proxy-url: the operator's client, kopf's session and kubectl gpuval each tunnel through
    the test's CONNECT proxy. HTTPS_PROXY: used for a server name only the proxy can resolve,
    and, as kubectl does, neither for a loopback server nor for a name NO_PROXY lists."""
    host, port = host_port(cluster.server)
    config = yaml.safe_load(cluster.kubeconfig.read_text())

    def written(name: str, **fields: Any) -> Path:
        config["clusters"][0]["cluster"].update(fields)
        path = tmp_path / name
        path.write_text(yaml.safe_dump(config))
        return path

    async def both(login: Login) -> list[str]:
        async with KubeClient(login, max_retries=1) as own:
            versions = [(await own.get("/version"))["gitVersion"]]
        given = kopf_context(login.identity)
        async with given.aiohttp_session as session, session.get(given.server + "/version") as got:
            versions.append((await got.json())["gitVersion"])
        return versions

    with connect_proxy() as proxy:
        kubeconfig = written(
            "proxied.kubeconfig", **{"proxy-url": f"http://127.0.0.1:{proxy.port}"}
        )
        assert len(asyncio.run(both(load_credentials(str(kubeconfig))))) == 2
        with connect(str(kubeconfig)) as login:
            assert Objects(login).missing() == []
        assert proxy.tunnels == [f"{host}:{port}"] * 3

    del config["clusters"][0]["cluster"]["proxy-url"]
    with connect_proxy(hosts={"gpuval-api.test": host}) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", f"127.0.0.1:{proxy.port}")
        # The API server's certificate does not name gpuval-api.test: only the route is tested.
        kubeconfig = written(
            "named.kubeconfig",
            server=f"https://gpuval-api.test:{port}",
            **{"insecure-skip-tls-verify": True},
        )
        del config["clusters"][0]["cluster"]["certificate-authority"]
        kubeconfig.write_text(yaml.safe_dump(config))
        assert len(asyncio.run(both(load_credentials(str(kubeconfig))))) == 2
        with connect(str(kubeconfig)) as login:
            assert Objects(login).missing() == []
        assert proxy.tunnels == [f"gpuval-api.test:{port}"] * 3
        asyncio.run(both(load_credentials(str(cluster.kubeconfig))))  # loopback: never proxied
        monkeypatch.setenv("NO_PROXY", "example.org,.test")
        with pytest.raises(aiohttp.ClientConnectorError):
            asyncio.run(both(load_credentials(str(kubeconfig))))
        assert len(proxy.tunnels) == 3


@pytest.mark.usefixtures("podrunner")
def test_the_operator_runs_a_validation_past_the_expiry_of_its_exec_tokens(
    cluster: Cluster,
    fleet: Fleet,
    namespace: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """The operator (kopf and its own client) logs in through a plugin whose tokens live 20 s:
    a validation of several waves outlives at least two of them and completes, every node
    Passed, the operator's own client was never refused, and kopf, whose first token is long
    dead when the validation is deleted, logs in again and removes its finalizer."""
    account = "operator-exec"
    cluster.kubectl("create", "serviceaccount", account, "-n", namespace)
    binding = unique_name("exec-operator")
    cluster.kubectl(
        "create",
        "clusterrolebinding",
        binding,
        "--clusterrole=cluster-admin",
        f"--serviceaccount={namespace}:{account}",
    )
    plugin = token_plugin(cluster, namespace, account, tmp_path / "plugin", life=LIFE)
    kubeconfig = plugin.kubeconfig(tmp_path / "exec.kubeconfig")
    # Real time on these nodes (the simulated burn really takes its 10 s): the run must outlive
    # two 20 s tokens whatever the machine's speed.
    for _ in range(4):
        fleet.add(unique_name("exp"), timeScale=1.0)
    name = unique_name("exp")
    port = free_port()
    try:
        with (
            Reaper(plugin) as reaper,
            operator_process(kubeconfig, metrics_port=port, log_file=tmp_path / "operator.log"),
        ):
            apply(
                cluster,
                fleet.validation(name, maxConcurrent=1, checks={"burn": {"durationSeconds": 10}}),
            )

            def finished() -> dict[str, Any] | None:
                status = status_of(cluster, name)
                return status if (status.get("run") or {}).get("completedAt") else None

            status = wait_for("the run to complete", finished, timeout=400)
            completed = time.time()
            metrics = scrape(port)
            delete_validation(cluster, name)
            wait_for(
                "the validation to go",
                lambda: get_json(cluster, "gpuvalidation", name) is None,
                timeout=60,
            )
    finally:
        cluster.kubectl("delete", "clusterrolebinding", binding, check=False)

    assert status["nodes"]["passed"] == 4 and status["nodes"]["total"] == 4
    outlived = [secret for secret, when in reaper.reaped if when < completed]
    assert len(outlived) >= 2, "the run outlived at least two of the operator's tokens"
    assert len(plugin.runs()) >= 3
    assert "Re-authentication has been initiated" in (tmp_path / "operator.log").read_text()
    refused = re.findall(
        r'gpuval_operator_api_requests_total\{[^}]*code="401"[^}]*\} (\S+)', metrics
    )
    assert [float(v) for v in refused if float(v)] == []
