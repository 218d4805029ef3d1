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
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpuval_agent.cli import main
from gpuval_agent.errors import AgentError
from gpuval_agent.kube import ApiServer, ReportUnreachableError, ReportWriter
from gpuval_api.report import (
    build_running_status,
    parse_termination_message,
)
from gpuval_api.termination import TERMINATION_MESSAGE_LIMIT


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
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    (tmp_path / "token").write_text("token-one\n")
    state = FakeApiServer(url="", directory=tmp_path)

    class Handler(BaseHTTPRequestHandler):
        def do_PATCH(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.requests.append(
                {
                    "path": self.path,
                    "contentType": self.headers["Content-Type"],
                    "authorization": self.headers["Authorization"],
                    "body": json.loads(body),
                }
            )
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
    return ReportWriter(server, "run-1-node-a", budget=5, backoff=0.01)


class FakeClock:
    """Time that passes only when the writer sleeps."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


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


def test_a_write_keeps_trying_through_a_long_outage_until_the_deadline(
    api: FakeApiServer,
) -> None:
    clock = FakeClock()
    server = ApiServer(api.url, api.directory / "token", api.directory / "ca.crt")
    writer = ReportWriter(
        server, "run-1-node-a", deadline=clock.now + 3600, clock=clock.time, sleep=clock.sleep
    )
    api.answers = [503] * 40
    writer.patch_status({"phase": "Running"})
    assert len(api.requests) == 41
    # Ten minutes of outage and more, with the backoff capped so the write lands soon after.
    assert sum(clock.sleeps) > 300 and max(clock.sleeps) == 10.0


def test_a_write_gives_up_at_the_deadline_naming_the_last_answer(api: FakeApiServer) -> None:
    clock = FakeClock()
    server = ApiServer(api.url, api.directory / "token", api.directory / "ca.crt")
    writer = ReportWriter(
        server, "run-1-node-a", deadline=clock.now + 30, clock=clock.time, sleep=clock.sleep
    )
    api.answers = [503] * 100
    with pytest.raises(ReportUnreachableError, match=r"failed \d+ times over \d+s; last: HTTP 503"):
        writer.patch_status({"phase": "Running"})
    assert clock.now <= 1_000_000.0 + 30


def test_a_missing_report_is_an_error_naming_it(api: FakeApiServer) -> None:
    api.answers = [404]
    with pytest.raises(AgentError, match=r"'run-1-node-a' \(GPUVAL_REPORT_NAME\) does not exist"):
        _writer(api).patch_status({"phase": "Running"})
    assert len(api.requests) == 1


def test_a_forbidden_write_says_to_check_the_role(api: FakeApiServer) -> None:
    api.answers = [403]
    with pytest.raises(AgentError, match=r"HTTP 403: answer 403.*ServiceAccount role"):
        _writer(api).patch_status({"phase": "Running"})


def test_cluster_mode_writes_running_what_failed_while_still_running_then_the_completed_report(
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
        "GPUVAL_TERMINATION_LOG": str(api.directory / "termination-log"),
    }.items():
        monkeypatch.setenv(key, value)
    assert main(["cluster"]) == 1
    running, found, completed = (r["body"]["status"] for r in api.requests)  # type: ignore[index]
    assert running["phase"] == "Running" and running["verdict"] is None
    # The burn's failure is in the report before the verdict: evidence if the agent is killed.
    assert found["phase"] == "Running" and "verdict" not in found
    assert found["reason"] == "OverTemperature" and found["failures"][0]["gpu"] == 3
    assert (
        found["message"].startswith("burn: GPU 3: reached 96")
        and "still running" in found["message"]
    )
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


def test_an_unreachable_api_server_leaves_the_verdict_in_the_termination_message(
    api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, port = api.url.removeprefix("https://").split(":")
    termination = api.directory / "termination-log"
    for key, value in {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": port,
        "GPUVAL_SERVICEACCOUNT_DIR": str(api.directory),
        "GPUVAL_REPORT_NAME": "run-1-node-a",
        "GPUVAL_NODE_NAME": "node-a",
        "GPUVAL_SIMULATE": json.dumps(
            {"gpus": 2, "timeScale": 0.001, "faults": [{"kind": "miscompare", "gpu": 1}]}
        ),
        "GPUVAL_CHECKS": '{"burn": {"durationSeconds": 5}}',
        # Every write is answered 503 until a deadline two seconds away.
        "GPUVAL_DEADLINE": str(int(time.time()) + 2),
        "GPUVAL_TERMINATION_LOG": str(termination),
    }.items():
        monkeypatch.setenv(key, value)
    api.answers = [503] * 1000
    assert main(["cluster", "--backend", "simulated"]) == 1
    status = parse_termination_message(termination.read_text())
    assert status is not None
    assert status["verdict"] == "Failed" and status["reason"] == "BurnMismatch"
    assert status["failures"][0]["gpu"] == 1
    assert len(termination.read_bytes()) <= TERMINATION_MESSAGE_LIMIT
