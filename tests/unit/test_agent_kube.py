"""The in-cluster report writer against a local HTTPS server standing in for the API server.

This pins the HTTP contract (method, path, merge-patch body, bearer token, CA verification,
retries); writing a real report on a real control plane is tests/integration's job.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpuval_agent.cli import main
from gpuval_agent.errors import AgentError
from gpuval_agent.kube import ApiServer, ReportWriter
from gpuval_api.report import build_running_status


@dataclass
class FakeApiServer:
    url: str
    directory: Path
    answers: list[int] = field(default_factory=list)
    requests: list[dict[str, object]] = field(default_factory=list)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeApiServer]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the test server's certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "ca.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    (tmp_path / "token").write_text("token-one\n")
    state = FakeApiServer(url="", directory=tmp_path)

    class Handler(BaseHTTPRequestHandler):
        def do_PATCH(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.requests.append({
                "path": self.path,
                "contentType": self.headers["Content-Type"],
                "authorization": self.headers["Authorization"],
                "body": json.loads(body),
            })  # fmt: skip
            code = state.answers.pop(0) if state.answers else 200
            answer = json.dumps({"message": f"answer {code}"}).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    state.url = f"https://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()


def _writer(api: FakeApiServer) -> ReportWriter:
    server = ApiServer(api.url, api.directory / "token", api.directory / "ca.crt")
    return ReportWriter(server, "run-1-node-a", attempts=3, backoff=0.01)


def test_status_is_a_json_merge_patch_on_the_status_subresource_with_the_token(
    api: FakeApiServer,
) -> None:
    status = build_running_status(datetime(2026, 11, 30, tzinfo=UTC))
    _writer(api).patch_status(status)
    (request,) = api.requests
    assert request["path"] == "/apis/gpuval.dev/v1alpha1/gpunodereports/run-1-node-a/status"
    assert request["contentType"] == "application/merge-patch+json"
    assert request["authorization"] == "Bearer token-one"
    assert request["body"] == {"status": status}


def test_the_token_is_read_again_for_every_request(api: FakeApiServer) -> None:
    writer = _writer(api)
    writer.patch_status({"phase": "Running"})
    (api.directory / "token").write_text("token-two")
    writer.patch_status({"phase": "Completed"})
    assert [r["authorization"] for r in api.requests] == ["Bearer token-one", "Bearer token-two"]


def test_transient_answers_are_retried(api: FakeApiServer) -> None:
    api.answers = [503, 429]
    _writer(api).patch_status({"phase": "Running"})
    assert len(api.requests) == 3


def test_a_missing_report_is_an_error_naming_it(api: FakeApiServer) -> None:
    api.answers = [404]
    with pytest.raises(AgentError, match=r"'run-1-node-a' \(GPUVAL_REPORT_NAME\) does not exist"):
        _writer(api).patch_status({"phase": "Running"})
    assert len(api.requests) == 1


def test_a_forbidden_write_says_to_check_the_role(api: FakeApiServer) -> None:
    api.answers = [403]
    with pytest.raises(AgentError, match=r"HTTP 403: answer 403.*ServiceAccount role"):
        _writer(api).patch_status({"phase": "Running"})


def test_cluster_mode_writes_running_then_the_completed_report(
    api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, port = api.url.removeprefix("https://").split(":")
    for key, value in {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": port,
        "GPUVAL_SERVICEACCOUNT_DIR": str(api.directory),
        "GPUVAL_REPORT_NAME": "run-1-node-a",
        "GPUVAL_NODE_NAME": "node-a",
        "GPUVAL_BACKEND": "simulated",
        "GPUVAL_SIMULATE": json.dumps(
            {"gpus": 4, "timeScale": 0.001, "faults": [{"kind": "overheat", "gpu": 3}]}
        ),
        "GPUVAL_CHECKS": '{"burn": {"durationSeconds": 5}}',
        "GPUVAL_EXPECTED_GPUS": "4",
    }.items():
        monkeypatch.setenv(key, value)
    assert main(["cluster"]) == 1
    running, completed = (r["body"]["status"] for r in api.requests)  # type: ignore[index]
    assert running["phase"] == "Running" and running["verdict"] is None
    assert completed["phase"] == "Completed"
    assert completed["verdict"] == "Failed" and completed["reason"] == "OverTemperature"
    assert completed["summary"]["gpuCount"] == 4
    assert completed["failures"][0]["gpu"] == 3
    assert completed["result"]["node"] == "node-a"
    assert completed["result"]["checksConfig"]["burn"]["durationSeconds"] == 5


def test_an_invalid_checks_env_is_reported_in_the_report_and_exits_two(
    api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, port = api.url.removeprefix("https://").split(":")
    for key, value in {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": port,
        "GPUVAL_SERVICEACCOUNT_DIR": str(api.directory),
        "GPUVAL_REPORT_NAME": "run-1-node-a",
        "GPUVAL_CHECKS": '{"burn": {"durationSeconds": "long"}}',
    }.items():
        monkeypatch.setenv(key, value)
    assert main(["cluster", "--backend", "simulated"]) == 2
    completed = api.requests[-1]["body"]["status"]  # type: ignore[index]
    assert completed["reason"] == "InvalidConfig"
    assert "burn.durationSeconds" in completed["message"] and "long" in completed["message"]
