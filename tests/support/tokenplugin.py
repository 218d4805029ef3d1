"""An exec credential plugin whose tokens really expire, on the real control plane.

Each run of the plugin creates a Secret, asks the API server for a ServiceAccount token bound to
that Secret (`kubectl create token --bound-object-kind Secret`), and returns it with an
`expirationTimestamp` `life` seconds ahead (none when `life` is 0, as plugins that leave expiry
to a 401 do). A TokenRequest lives at least ten minutes, so the `Reaper` makes the advertised
expiry true: it deletes each token's Secret once its time has passed, and the API server refuses
the token from then on. `revoke` kills the current token at once (the 401 tests).
"""

from __future__ import annotations

import json
import stat
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuval_devtools.controlplane import Cluster

PLUGIN = """#!{python}
import datetime, json, subprocess, sys, time, uuid
kubectl = json.loads(sys.argv[1])
namespace, account, life, log = sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
secret = "tok-" + uuid.uuid4().hex[:10]
subprocess.run(kubectl + ["create", "secret", "generic", secret, "-n", namespace],
               check=True, capture_output=True)
token = subprocess.run(
    kubectl + ["create", "token", account, "-n", namespace, "--duration", "10m",
               "--bound-object-kind", "Secret", "--bound-object-name", secret],
    check=True, capture_output=True, text=True).stdout.strip()
status = {{"token": token}}
expires = 0.0
if life > 0:
    expires = time.time() + life
    stamp = datetime.datetime.fromtimestamp(expires, datetime.UTC)
    status["expirationTimestamp"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
with open(log, "a") as out:
    out.write(json.dumps({{"secret": secret, "token": token, "expires": expires}}) + "\\n")
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": status}}))
"""


@dataclass
class TokenPlugin:
    cluster: Cluster
    namespace: str
    account: str
    log: Path  # one line per run
    args: list[str]

    def runs(self) -> list[dict[str, Any]]:
        """One entry per run of the plugin: its Secret, token and advertised expiry."""
        if not self.log.is_file():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def revoke(self, run: dict[str, Any]) -> None:
        self.cluster.kubectl("delete", "secret", run["secret"], "-n", self.namespace)

    def kubeconfig(self, path: Path, **cluster_fields: Any) -> Path:
        """The test cluster's server and CA, this plugin as the user."""
        config = yaml.safe_load(self.cluster.kubeconfig.read_text())
        config["users"][0]["user"] = {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": str(self.log.parent / "token-plugin"),
                "args": self.args,
                "interactiveMode": "Never",
            }
        }
        config["clusters"][0]["cluster"].update(cluster_fields)
        path.write_text(yaml.safe_dump(config))
        return path


def token_plugin(
    cluster: Cluster, namespace: str, account: str, directory: Path, *, life: float
) -> TokenPlugin:
    """A plugin issuing tokens of `account` (a ServiceAccount in `namespace`) that expire after
    `life` seconds (0: no expiry said)."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "token-plugin"
    script.write_text(PLUGIN.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    kubectl = [
        str(cluster.binaries.kubectl),
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--cache-dir",
        str(directory / "kubectl-cache"),
    ]
    log = directory / "runs.jsonl"
    args = [json.dumps(kubectl), namespace, account, str(life), str(log)]
    return TokenPlugin(cluster, namespace, account, log, args)


class Reaper:
    """Deletes each token's Secret once its advertised expiry has passed: the token is dead from
    then on. `reaped` lists (Secret, when) of every token it ended."""

    def __init__(self, plugin: TokenPlugin) -> None:
        self.plugin = plugin
        self.reaped: list[tuple[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="token-reaper", daemon=True)

    def __enter__(self) -> Reaper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        done: set[str] = set()
        while not self._stop.wait(0.5):
            for run in self.plugin.runs():
                if run["expires"] and run["expires"] <= time.time() and run["secret"] not in done:
                    self.plugin.revoke(run)
                    done.add(run["secret"])
                    self.reaped.append((run["secret"], time.time()))
