"""The real backend: NVML for the record and telemetry, CUDA through cuda-python and torch.

torch is imported when a check first needs it (the burn, by default), in the background so the
progress line keeps moving; the driver and health checks use NVML and cuda-python only, and read
torch's versions from its files without importing it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.util
import os
import socket
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from gpuval_agent.backends.base import (
    AllReduceOutcome,
    AllReduceSize,
    Backend,
    BurnMeasurement,
    BurnProgress,
    GpuUse,
    ProgressCallback,
    TelemetrySample,
    XidEvent,
)
from gpuval_agent.backends.nvml.reader import Nvml
from gpuval_agent.backends.ranks import (
    SAFE_NCCL_ENV,
    TIMING_NCCL_ENV,
    RankGroup,
    rank_command,
)
from gpuval_agent.errors import AgentError, BackendUnavailableError
from gpuval_agent.memtest import (
    MemoryFlip,
    MemoryMeasurement,
    MemoryPlan,
    MemoryProgress,
    MemoryProgressCallback,
    parse_flips,
)
from gpuval_agent.state.model import GpuState
from gpuval_agent.training import TrainOutcome, TrainPlan, TrainProgressCallback
from gpuval_api import AgentEnv
from gpuval_api.checks import Precision
from gpuval_api.result import Environment


def _import_torch() -> ModuleType:
    try:
        return importlib.import_module("torch")
    except ImportError as error:
        raise BackendUnavailableError(
            f"the cuda backend needs torch, which did not import ({error}); install the agent's "
            "'gpu' extra (pip install 'gpuval-agent[gpu]') or use the agent image"
        ) from None


def _cuda_driver() -> Any:
    """cuda-python's driver bindings, or None where cuda-python is missing."""
    try:
        return importlib.import_module("cuda.bindings.driver")
    except ImportError:
        return None


class CudaBackend(Backend):
    name = "cuda"

    def __init__(self) -> None:
        # NVML numbers GPUs in PCI bus order; make CUDA (torch, NCCL ranks) use the same order.
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        for key, value in SAFE_NCCL_ENV.items():
            os.environ.setdefault(key, value)
        self._nvml: Nvml | None = None
        self._torch: ModuleType | None = None
        self._torch_error: BaseException | None = None
        self._torch_ready = threading.Event()
        self._burn: Any = None
        self._prepared: PreparedAllReduce | None = None
        self._training: Any = None  # the training check's ranks while they run (trainranks)
        self._copy: Any = None
        # NVML index -> CUDA ordinal. They differ when CUDA_VISIBLE_DEVICES hides or reorders
        # GPUs; the checks speak NVML indices, torch and NCCL CUDA ordinals.
        self._uuids: dict[int, str] = {}
        self._ordinals: dict[int, int] = {}
        self._torch_started = False

    def _load_torch(self) -> None:
        try:
            self._torch = _import_torch()
            self._burn = importlib.import_module("gpuval_agent.backends.torch.burn")
            self._copy = importlib.import_module("gpuval_agent.backends.torch.copy")
        except BaseException as error:  # re-raised where torch is needed
            self._torch_error = error
        finally:
            self._torch_ready.set()

    def _start_torch_import(self) -> None:
        """torch's import starts when a check first needs torch (the burn, by default), so it is
        part of that check's set-up time. It takes seconds and holds the GIL for most of them
        (loading libtorch): started at the end of the environment record, it stalled the main
        thread there for 4.5 s on 2x H200, time that no check counted (issue 9, B7)."""
        if not self._torch_started:
            self._torch_started = True
            threading.Thread(target=self._load_torch, name="torch-import", daemon=True).start()

    def torch(self) -> ModuleType:
        self._start_torch_import()
        self._torch_ready.wait()
        if self._torch_error is not None:
            if isinstance(self._torch_error, BackendUnavailableError):
                raise self._torch_error
            raise BackendUnavailableError(
                f"torch failed to import: {type(self._torch_error).__name__}: {self._torch_error}"
            )
        assert self._torch is not None
        return self._torch

    def _nvml_session(self) -> Nvml:
        if self._nvml is None:
            self._nvml = Nvml()
        return self._nvml

    def environment(self) -> Environment:
        began = time.monotonic()
        session = self._nvml_session()
        opened = time.monotonic()
        environment: Environment = session.environment()
        queried = time.monotonic()
        self._uuids = {g.index: g.uuid for g in environment.gpus if g.uuid}
        if environment.cuda_driver_version is None:
            environment.cuda_driver_version = _cuda_python_driver_version()
        # torch's import takes seconds and the burn needs it anyway: the driver check reads
        # torch's versions from its files without importing it, and the import waits for the
        # first check that needs torch, counted in its set-up.
        torch_version, runtime = torch_versions_from_files()
        self.environment_split = {
            "nvmlSessionSeconds": round(opened - began, 3),
            "nvmlQueriesSeconds": round(queried - opened, 3),
            "versionsSeconds": round(time.monotonic() - queried, 3),
        }
        if runtime is None:
            self.finish_environment(environment)
        else:
            environment.torch_version, environment.cuda_runtime_version = torch_version, runtime
        return environment

    def finish_environment(self, environment: Environment) -> None:
        runtime, torch_version, nccl = self._torch_versions()
        environment.cuda_runtime_version = runtime or environment.cuda_runtime_version
        environment.torch_version = torch_version or environment.torch_version
        environment.nccl_version = nccl

    def _torch_versions(self) -> tuple[str | None, str | None, str | None]:
        try:
            torch = self.torch()
        except BackendUnavailableError:
            return None, None, None
        nccl = None
        try:
            version = torch.cuda.nccl.version()
            nccl = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
        except (RuntimeError, AttributeError):
            nccl = None
        return torch.version.cuda, torch.__version__, nccl

    def cuda_init(self, gpus: list[int]) -> dict[int, str | None]:
        driver = _cuda_driver()
        if driver is None:
            return dict.fromkeys(gpus, "cuda-python (cuda.bindings) is not installed")
        (status,) = driver.cuInit(0)
        if status != driver.CUresult.CUDA_SUCCESS:
            return dict.fromkeys(gpus, f"cuInit failed: {status.name}")
        ordinals = cuda_ordinals_by_uuid(driver)
        results: dict[int, str | None] = {}
        for gpu in gpus:
            uuid = self._uuids.get(gpu)
            ordinal = (
                ordinals.get(cuda_spelling(uuid))
                if uuid
                else (gpu if gpu < len(ordinals) else None)
            )
            if ordinal is None:
                visible = os.environ.get("CUDA_VISIBLE_DEVICES")
                results[gpu] = (
                    f"{uuid or 'this GPU'} is not among the {len(ordinals)} devices CUDA sees"
                    + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else "")
                )
                continue
            status, device = driver.cuDeviceGet(ordinal)
            if status == driver.CUresult.CUDA_SUCCESS:
                status, _context = driver.cuDevicePrimaryCtxRetain(device)
            if status != driver.CUresult.CUDA_SUCCESS:
                results[gpu] = f"creating a context on CUDA device {ordinal} failed: {status.name}"
                continue
            driver.cuDevicePrimaryCtxRelease(device)
            self._ordinals[gpu] = ordinal
            results[gpu] = None
        return results

    def _cuda(self, gpus: list[int]) -> list[int]:
        return [self._ordinals.get(gpu, gpu) for gpu in gpus]

    def _nvml_index(self, ordinal: int) -> int:
        return next((g for g, o in self._ordinals.items() if o == ordinal), ordinal)

    def telemetry(self) -> list[TelemetrySample]:
        samples: list[TelemetrySample] = self._nvml_session().telemetry()
        return samples

    def gpu_state(self) -> list[GpuState]:
        return self._nvml_session().gpu_states()

    def xid_events(self) -> list[XidEvent]:
        events: list[XidEvent] = self._nvml_session().xid_events()
        return events

    def gpu_use(self) -> list[GpuUse] | None:
        uses: list[GpuUse] | None = self._nvml_session().gpu_use()
        return uses

    def agent_gpu_processes(self) -> dict[int, int]:
        """This process on every GPU, and each live prestarted NCCL rank on its own."""
        counts = dict.fromkeys(range(self._nvml_session().count), 1)
        for ranks in (self._prepared, self._training):
            if ranks is not None:
                for ordinal in ranks.live_devices():
                    gpu = self._nvml_index(ordinal)
                    counts[gpu] = counts.get(gpu, 1) + 1
        return counts

    def burn(
        self,
        gpus: list[int],
        precision: Precision,
        matrix_size: int,
        seconds: float,
        *,
        on_progress: ProgressCallback,
        stop: threading.Event,
    ) -> list[BurnMeasurement]:
        began = time.monotonic()
        self.torch()  # a wait for torch's import is part of the first burn's set-up time
        remaining = max(seconds - (time.monotonic() - began), 0.0)

        def progress(update: BurnProgress) -> None:
            on_progress(replace(update, gpu=self._nvml_index(update.gpu)))

        measurements: list[BurnMeasurement] = self._burn.burn(
            self._cuda(gpus),
            precision,
            matrix_size,
            remaining,
            on_progress=progress,
            stop=stop,
            slowdown=_burn_slowdown(),
        )
        for measurement in measurements:
            measurement.gpu = self._nvml_index(measurement.gpu)
        return measurements

    def memory_test(
        self,
        gpus: list[int],
        plan: MemoryPlan,
        *,
        on_progress: MemoryProgressCallback,
        stop: threading.Event,
    ) -> list[MemoryMeasurement]:
        flips = _memory_flips()
        self.torch()  # a wait for torch's import is part of the memory check's time
        memtest = importlib.import_module("gpuval_agent.backends.torch.memtest")

        def progress(update: MemoryProgress) -> None:
            on_progress(replace(update, gpu=self._nvml_index(update.gpu)))

        by_ordinal: dict[int, list[MemoryFlip]] = {}
        for flip in flips:
            by_ordinal.setdefault(self._cuda([flip.gpu])[0], []).append(flip)
        measurements: list[MemoryMeasurement] = memtest.memtest(
            self._cuda(gpus), plan, flips=by_ordinal, on_progress=progress, stop=stop
        )
        for measurement in measurements:
            measurement.gpu = self._nvml_index(measurement.gpu)
        return measurements

    def host_device_bandwidth(
        self, direction: str, gpus: list[int], nbytes: int, iterations: int
    ) -> dict[int, float]:
        self.torch()
        figures: dict[int, float] = self._copy.host_device(
            direction, self._cuda(gpus), nbytes, iterations
        )
        return {self._nvml_index(ordinal): gbps for ordinal, gbps in figures.items()}

    def device_copy_bandwidth(self, gpu: int, nbytes: int, iterations: int) -> float:
        self.torch()
        figure: float = self._copy.device_local(self._cuda([gpu])[0], nbytes, iterations)
        return figure

    def peer_access(self, src: int, dst: int) -> bool:
        self.torch()
        access: bool = self._copy.peer_access(*self._cuda([src, dst]))
        return access

    def peer_bandwidth(self, src: int, dst: int, nbytes: int, iterations: int) -> float:
        self.torch()
        figure: float = self._copy.peer(*self._cuda([src, dst]), nbytes, iterations)
        return figure

    def prepare_all_reduce(
        self, gpus: list[int], sizes: list[int], iterations: int, timeout_seconds: float
    ) -> None:
        self._prepared = PreparedAllReduce(self._cuda(gpus), sizes, iterations, timeout_seconds)

    def all_reduce(
        self, gpus: list[int], sizes: list[int], iterations: int, timeout_seconds: float
    ) -> AllReduceOutcome:
        self.torch()
        self._copy.release()  # the ranks need the memory the copies and the burn held
        devices = self._cuda(gpus)
        prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared.key == (tuple(devices), tuple(sizes), iterations):
            return prepared.run()
        if prepared is not None:
            prepared.cancel()
        return all_reduce_processes(devices, sizes, iterations, timeout_seconds)

    def train(
        self,
        gpus: list[int],
        plan: TrainPlan,
        *,
        on_progress: TrainProgressCallback,
        stop: threading.Event,
    ) -> TrainOutcome:
        plan = _perturbed(plan)
        if self._torch is not None:
            self._copy.release()  # the ranks need the memory the copies and the burn held
        if self._prepared is not None:  # the NCCL check's ranks, if it never ran
            self._prepared.cancel()
            self._prepared = None
        devices = self._cuda(gpus)
        started = self._training
        if started is None or started.devices != devices or started.plan != plan:
            if started is not None:  # started for other GPUs or another shape: not these
                started.group.cancel()
            ranks = importlib.import_module("gpuval_agent.backends.trainranks")
            self._training = ranks.TrainingRanks(devices, plan)
        training = self._training
        assert training is not None
        try:
            outcome: TrainOutcome = training.run(gpus, on_progress, stop)
        finally:
            self._training = None
        return outcome

    def prepare_train(self, gpus: list[int], plan: TrainPlan) -> None:
        """Start the training ranks now (while the burn runs): their interpreter, torch's import
        and CUDA context are ready when the check needs them. They hold no model until told to
        train, and the in-use watch counts them as the agent's (agent_gpu_processes)."""
        if self._training is not None or not gpus:
            return
        ranks = importlib.import_module("gpuval_agent.backends.trainranks")
        self._training = ranks.TrainingRanks(self._cuda(gpus), _perturbed(plan))

    def close(self) -> None:
        if self._prepared is not None:
            self._prepared.cancel()
            self._prepared = None
        if self._training is not None:  # started for a training step that never ran
            self._training.group.cancel()
            self._training = None
        if self._nvml is not None:
            self._nvml.close()


def _burn_slowdown() -> float | None:
    """The burn's test hook: GPUVAL_BURN_SLOWDOWN, a share of a healthy GPU's throughput."""
    text = os.environ.get(AgentEnv.BURN_SLOWDOWN, "").strip()
    if not text:
        return None
    try:
        factor = float(text)
    except ValueError:
        factor = 0.0
    if not 0.0 < factor < 1.0:
        raise AgentError(
            f"{AgentEnv.BURN_SLOWDOWN}={text!r}: give a share of full throughput between 0 and 1 "
            "(e.g. 0.8), or unset it"
        )
    return factor


def _perturbed(plan: TrainPlan) -> TrainPlan:
    """`plan` with the test hook's perturbation, if one is asked for."""
    step, rank = _train_perturbation()
    return replace(plan, perturb_step=step, perturb_rank=rank)


def _train_perturbation() -> tuple[int | None, int]:
    """The training check's test hook: GPUVAL_TRAIN_PERTURB, STEP or STEP:RANK (none when unset)."""
    text = os.environ.get(AgentEnv.TRAIN_PERTURB, "").strip()
    if not text:
        return None, 0
    step, _, rank = text.partition(":")
    try:
        parsed = int(step), int(rank or 0)
    except ValueError:
        parsed = 0, -1
    if parsed[0] < 1 or parsed[1] < 0:
        raise AgentError(
            f"{AgentEnv.TRAIN_PERTURB}={text!r}: give the 1-based step (the warm-up counted) and "
            "optionally the rank, e.g. 10 or 10:1, or unset it"
        )
    return parsed


def _memory_flips() -> list[MemoryFlip]:
    """The memory check's test hook: flips asked for in GPUVAL_MEMORY_INJECT (none when unset)."""
    text = os.environ.get(AgentEnv.MEMORY_INJECT, "").strip()
    if not text:
        return []
    try:
        return parse_flips(text, AgentEnv.MEMORY_INJECT)
    except ValueError as error:
        raise AgentError(str(error)) from None


def torch_versions_from_files() -> tuple[str | None, str | None]:
    """(torch's version, its CUDA as major.minor) without importing torch: from the
    `torch/version.py` that `torch.version` would load (`__version__`, `cuda`), else from the
    distribution's version tag. PyPI's CUDA wheels carry no tag in their metadata ('2.11.0' where
    torch says '2.11.0+cu130'), so the metadata alone made the driver check import torch, 4.4 s
    on 2x H200 that no check counted. (None, None) when torch is not installed."""
    spec = importlib.util.find_spec("torch")  # finds the package without running its __init__
    for location in (spec.submodule_search_locations or []) if spec else []:
        values = _string_constants(Path(location) / "version.py")
        if values.get("__version__"):
            return values["__version__"], values.get("cuda") or None
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None, None
    return version, cuda_from_local_tag(version)


def _string_constants(path: Path) -> dict[str, str]:
    """NAME = 'text' assignments at the top of a Python file, read without running it."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    found: dict[str, str] = {}
    for node in tree.body:
        target: ast.expr | None = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            found.update({target.id: value.value} if isinstance(value.value, str) else {})
    return found


def cuda_from_local_tag(version: str) -> str | None:
    """'2.11.0+cu130' -> '13.0', '2.4.1+cu121' -> '12.1'; None without a +cuNNN tag."""
    _, _, local = version.partition("+")
    digits = local.removeprefix("cu")
    if not local.startswith("cu") or not digits.isdigit() or len(digits) < 3:
        return None
    return f"{int(digits[:-1])}.{digits[-1]}"


def _cuda_python_driver_version() -> str | None:
    driver = _cuda_driver()
    if driver is None:
        return None
    status, version = driver.cuDriverGetVersion()
    if status != driver.CUresult.CUDA_SUCCESS:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def _uuid_text(raw: bytes) -> str:
    """CUDA's 16 UUID bytes in NVML's spelling: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx."""
    h = bytes(raw).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def cuda_spelling(uuid: str) -> str:
    """An NVML UUID as `_uuid_text` spells CUDA's: a MIG device's 'MIG-<hex groups>' (R470 and
    later) is CUDA's 'GPU-<same groups>', which cuDeviceGetUuid_v2 returns for a MIG device.
    Unverified on MIG hardware here (the H200 machine's MIG mode stays off)."""
    if uuid.startswith("MIG-") and not uuid.startswith("MIG-GPU-"):
        return "GPU-" + uuid[len("MIG-") :]
    return uuid


def cuda_ordinals_by_uuid(driver: Any) -> dict[str, int]:
    """UUID -> ordinal of every device CUDA sees (after CUDA_VISIBLE_DEVICES)."""
    status, count = driver.cuDeviceGetCount()
    if status != driver.CUresult.CUDA_SUCCESS:
        return {}
    get_uuid = getattr(driver, "cuDeviceGetUuid_v2", None) or driver.cuDeviceGetUuid
    found: dict[str, int] = {}
    for ordinal in range(count):
        status, device = driver.cuDeviceGet(ordinal)
        if status != driver.CUresult.CUDA_SUCCESS:
            continue
        status, uuid = get_uuid(device)
        if status == driver.CUresult.CUDA_SUCCESS:
            found[_uuid_text(uuid.bytes)] = ordinal
    return found


_CHECK, _SWEEP = 1, 2  # the rank process's command ids: the checked sum, the sweep
_EXIT_SECONDS = 2.0  # for a rank that reported its error to exit before it is described


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class PreparedAllReduce:
    """The NCCL check's rank processes (backends/rankprocess.py), one per GPU. Started early
    (at the start of the run), they meet and check one all-reduce's sum while the other checks
    run; the sweep starts the moment the check needs it.

    The parent's environment is passed on whole, plus NCCL_DEBUG=INFO (so a hang leaves its
    trail), the timing setting and the multicast-off settings.
    """

    def __init__(
        self,
        gpus: list[int],
        sizes: list[int],
        iterations: int,
        timeout_seconds: float,
        *,
        hang_rank: int | None = None,
    ) -> None:
        self.key = (tuple(gpus), tuple(sizes), iterations)
        self.devices = list(gpus)
        self.timeout_seconds = timeout_seconds
        self._dir = tempfile.TemporaryDirectory(prefix="gpuval-nccl-")
        port = _free_port()
        env = TIMING_NCCL_ENV | dict(os.environ) | SAFE_NCCL_ENV
        env.setdefault("NCCL_DEBUG", "INFO")
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (*sys.path, env.get("PYTHONPATH", "")) if p)
        logs = [Path(self._dir.name) / f"rank{rank}.log" for rank in range(len(gpus))]
        specs = [
            {
                "rank": rank,
                "world": len(gpus),
                "node": 0,
                "layout": [[0, len(gpus)]],
                "device": gpu,
                "storeHost": "127.0.0.1",
                "storePort": port,
                "initSeconds": timeout_seconds,
                "phaseSeconds": timeout_seconds,
                "events": str(log.with_suffix(".events")),
                # Fault injection for the GPU tests: this rank never joins the sweep.
                "testHang": "group" if rank == hang_rank else None,
            }
            for rank, (gpu, log) in enumerate(zip(gpus, logs, strict=True))
        ]
        self.group = RankGroup(
            [rank_command(f"nccl-{os.getpid()}", spec) for spec in specs],
            [env] * len(gpus),
            gated=True,
            logs=logs,
            labels=[f"rank {rank} (CUDA device {gpu})" for rank, gpu in enumerate(gpus)],
        )
        self.group.send({"op": "check", "id": _CHECK})
        self._sweep = {"op": "group", "id": _SWEEP, "sizes": sizes, "iterations": iterations}

    def cancel(self) -> None:
        self.group.cancel()
        self._dir.cleanup()

    def live_devices(self) -> list[int]:
        """The CUDA devices whose rank process still runs."""
        processes = self.group.processes
        return [d for d, p in zip(self.devices, processes, strict=True) if p.poll() is None]

    def run(self) -> AllReduceOutcome:
        deadline = time.monotonic() + self.timeout_seconds
        try:
            checked = self.group.answers(_CHECK, deadline)
            swept: list[dict[str, Any]] | str = checked
            if isinstance(checked, list) and not _errors(checked):
                self.group.send(self._sweep)
                swept = self.group.answers(_SWEEP, deadline)
            if swept == "timeout":
                self.group.kill()
                return AllReduceOutcome(timed_out=True, log_tail=self.group.run(True).log_tail)
            if isinstance(swept, str) or _errors(swept):
                # A rank that reports its error exits at once: let it, then say who died how.
                run = self.group.wait(_EXIT_SECONDS, grace_seconds=0.5)
                return AllReduceOutcome(
                    error=run.describe_failure(self.group.labels), log_tail=run.log_tail or None
                )
            outcome = AllReduceOutcome()
            assert isinstance(checked, list)
            if not all(event.get("sumOk") for event in checked):
                outcome.error = "the all-reduce gave a wrong sum on at least one rank"
                outcome.log_tail = self.group.run(False).log_tail or None
            outcome.sizes = [
                AllReduceSize(bytes=int(b), seconds=float(t)) for b, t in swept[0]["sizes"]
            ]
            return outcome
        finally:
            self.group.kill()
            self._dir.cleanup()


def _errors(events: list[dict[str, Any]]) -> list[str]:
    return [str(e["error"]) for e in events if "error" in e]


def all_reduce_processes(
    gpus: list[int],
    sizes: list[int],
    iterations: int,
    timeout_seconds: float,
    *,
    hang_rank: int | None = None,
) -> AllReduceOutcome:
    """Start one rank per GPU now and run the sweep."""
    return PreparedAllReduce(gpus, sizes, iterations, timeout_seconds, hang_rank=hang_rank).run()
