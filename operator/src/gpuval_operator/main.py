"""kopf registrations: start-up settings, one daemon per GpuValidation, clean-up. Nothing else
lives here.

Run with `gpuval-operator` (or `kopf run -m gpuval_operator.main --all-namespaces`).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import secrets
import socket
import time
from typing import Any, cast

import aiohttp
import kopf

from gpuval_api import keys
from gpuval_api.crd import GROUP, VALIDATION_PLURAL, VERSION, NodeSelector
from gpuval_operator.config import ConfigError, OperatorConfig
from gpuval_operator.control.controller import Context, ValidationController
from gpuval_operator.kube.client import ApiError, KubeClient
from gpuval_operator.kube.credentials import (
    CredentialsError,
    Login,
    kopf_context,
    load_credentials,
)
from gpuval_operator.kube.leader import LeaderElector, not_ready
from gpuval_operator.nodes.actor import NodeActor
from gpuval_operator.nodes.breaker.operatorwide import OperatorBreaker
from gpuval_operator.readmodel.metrics import make_registry, start_server
from gpuval_operator.readmodel.registry import Registry
from gpuval_operator.run.effects import Effects

log = logging.getLogger("gpuval_operator")


def configure(settings: kopf.OperatorSettings) -> None:
    """kopf settings that matter at scale (design.md, "Scale")."""
    # kopf's own Events only for problems: at INFO it posts one per handler per object.
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "gpuval-operator"
    settings.persistence.finalizer = keys.FINALIZER
    # A strict status schema prunes unknown fields, so kopf keeps its progress in annotations.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=keys.PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=keys.PREFIX, key="last-handled-configuration"
    )
    # Silent watch stalls are a known kopf failure mode: the server ends each watch, the client
    # gives up after.
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 30
    settings.scanning.disabled = True


@kopf.on.login()
async def login(memo: kopf.Memo, **_: Any) -> kopf.AiohttpSession:
    """kopf's session for the identity the operator's own client uses (startup loaded it:
    gpuval_operator.kube.credentials), so kopf and the client are one caller. kopf calls this
    again when that identity goes stale and when the API server answers 401: the identity kopf
    had is then loaded again, unless the client already did."""
    credentials: Login = memo.ctx.client.login
    given = getattr(memo, "kopf_identity", None)
    try:
        identity = await (credentials.current() if given is None else credentials.renew(given))
        context = kopf_context(identity)
    except CredentialsError as error:
        raise kopf.LoginError(str(error)) from None
    memo.kopf_identity = identity
    return context


def _elector(client: KubeClient, config: OperatorConfig) -> LeaderElector | None:
    """This replica's side of the leader Lease; None without one (no GPUVAL_LEASE_NAMESPACE)."""
    if not config.lease_namespace:
        return None
    return LeaderElector(
        client,
        namespace=config.lease_namespace,
        name=config.lease_name,
        identity=f"{socket.gethostname()}-{secrets.token_hex(3)}",
        duration=config.lease_duration_seconds,
        renew=config.lease_renew_seconds,
    )


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    configure(settings)
    try:
        config = OperatorConfig.from_env()
    except ConfigError as exc:
        raise kopf.PermanentError(str(exc)) from exc
    try:
        client = KubeClient(load_credentials())
    except CredentialsError as error:
        raise kopf.PermanentError(str(error)) from error
    registry = Registry()
    breaker = OperatorBreaker(client, config.max_nodes_out_of_service, registry.out_of_service)
    memo.ctx = Context(client=client, config=config, registry=registry, operator_breaker=breaker)
    elector = _elector(client, config)

    def not_ready_now() -> str | None:
        return not_ready(
            leading=registry.leading,
            lease_read=elector.read_at if elector is not None else None,
            duration=config.lease_duration_seconds,
            now=time.monotonic(),
        )

    prom = make_registry(registry, per_gpu=config.metrics_per_gpu, client=client)
    memo.metrics_runner = (
        await start_server(prom, config.metrics_port, not_ready=not_ready_now)
        if config.metrics_port
        else None
    )
    # /healthz answers from here on, so a standby waiting below is alive to its probes; /readyz
    # once it has read the Lease (kube.leader.not_ready).
    if elector is not None:
        await elector.acquire()
        memo.elector = elector
        memo.leader_task = asyncio.create_task(elector.keep(_lost_lease), name="leader")
    registry.leading = True
    # Start-up garbage (imported modules, settings) is never freed; keep the collector off it.
    gc.freeze()


async def _step_down(memo: kopf.Memo) -> None:
    """A clean stop (SIGTERM: a rolling update, `helm upgrade`): kopf runs this after it stopped
    every validation's daemon, so nothing acts any more and the Lease is released for the
    standby to lead at once, not after leaseDurationSeconds. A validation's loop that did not
    stop (kopf leaves it orphaned past its cancellation timeout) keeps the Lease to run out."""
    task: asyncio.Task[None] | None = getattr(memo, "leader_task", None)
    elector: LeaderElector | None = getattr(memo, "elector", None)
    if task is None or elector is None:
        return  # a standby, or no leader election
    task.cancel()  # no renewal after the release
    await asyncio.gather(task, return_exceptions=True)
    ctx: Context = memo.ctx
    ctx.registry.leading = False
    if ctx.running:
        log.warning("leader: %s still running: the lease is left to run out", sorted(ctx.running))
        return
    try:
        async with asyncio.timeout(elector.renew):
            await elector.release()
    except (ApiError, OSError, TimeoutError, aiohttp.ClientError) as exc:
        log.warning("leader: could not release the lease (it runs out instead): %s", exc)


def _lost_lease() -> None:
    """Another replica may lead from now on: stop at once, acting on nothing more."""
    logging.shutdown()
    os._exit(1)


@kopf.on.delete(GROUP, VERSION, VALIDATION_PLURAL)
async def forget_nodes(*, name: str, spec: kopf.Spec, memo: kopf.Memo, **_: Any) -> None:
    """A deleted validation's records leave its nodes, with the taint or cordon it alone asked
    for; what other validations said stays."""
    ctx: Context = memo.ctx
    selector = spec.get("nodeSelector")
    query = NodeSelector.model_validate(selector).to_query() if selector else ""
    actor = NodeActor(Effects(ctx.client, ctx.config, name=name, uid=""), ctx.operator_breaker)
    touched = await actor.forget(name, query)
    log.info("%s: deleted; its record left %d nodes", name, touched)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    await _step_down(memo)
    runner = getattr(memo, "metrics_runner", None)
    if runner is not None:
        await runner.cleanup()
    ctx = getattr(memo, "ctx", None)
    if ctx is not None:
        await ctx.client.close()


async def _wake_when_stopped(stopped: kopf.DaemonStopped, controller: ValidationController) -> None:
    await stopped.wait()
    controller.wake()


# kopf first signals a daemon (`stopped`) and waits `cancellation_backoff` seconds for it to end,
# and only then cancels it, which it logs as a WARNING ("is cancelled. Will escalate."). With no
# backoff it cancelled at once, so every clean deletion and stop logged that warning. The
# controller ends within a tick once woken (_wake_when_stopped); 10 s more for the rare tick
# stuck in an API call before kopf cancels it.
@kopf.daemon(GROUP, VERSION, VALIDATION_PLURAL, cancellation_backoff=5, cancellation_timeout=10)
async def validation_daemon(
    *,
    name: str,
    uid: str,
    body: kopf.Body,
    meta: kopf.Meta,
    stopped: kopf.DaemonStopped,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    ctx: Context = memo.ctx
    controller = ValidationController(ctx, name=name, uid=uid, body=body, stopped=stopped.is_set)
    waker = asyncio.create_task(_wake_when_stopped(stopped, controller))
    try:
        await controller.run()
    finally:
        waker.cancel()
        if meta.get("deletionTimestamp"):
            ctx.registry.pop(name, None)


def cli() -> None:
    """`gpuval-operator`: run the operator for the whole cluster (standalone: one replica, no
    peering).
    """
    kopf.configure(verbose=False)
    # kopf names itself `<user>@<host>` for peering (unused: standalone) unless told a name, and
    # finds the user through getpass.getuser(), which raises KeyError under a UID without a passwd
    # entry (OpenShift's arbitrary UIDs, any runAsUser the image does not list).
    identity = cast(Any, f"gpuval-operator@{socket.gethostname()}")
    kopf.run(clusterwide=True, standalone=True, identity=identity)
