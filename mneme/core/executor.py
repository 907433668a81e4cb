"""One experiment: build a variant, load it, restore the recorded state, run, verify, time.

`BaseExecutor` is bound to one recording, one kernel instance and one device. `open()`
rebuilds the recorded device state at the recorded virtual addresses (prologue regions
streamed in) and keeps the epilogue for verification; `execute(config)` then runs one
experiment and returns an `ExperimentResult` (it never raises for a failed experiment:
compile errors, faults and verification failures are recorded in the result).

`KernelBuilder` is the CPU half (link once, preprocess, compile, cache by variant hash); it
needs no device, so compile-ahead processes (`mneme.core.workers`) use it alone.
`tune_worker_main` is the entry point of a worker process (the seed's `TuneWorker`).
"""

from __future__ import annotations

import collections
import datetime
import hashlib
import inspect
import logging
import os
import re
import struct
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from mneme.core import limits
from mneme.core.backend import Backend, Device, DeviceBinary, LoadedKernel, Resources, check_cache_state
from mneme.core.errors import ExperimentError, IRError, MnemeError, UnsupportedError, UsageError
from mneme.core.types import ExperimentConfiguration, ExperimentResult

log = logging.getLogger(__name__)

MODES = ("ir", "ptx", "cubin")
# Configuration fields that change code generation but not the preprocessed IR.
_CODEGEN_FIELDS = (
    "passes", "codegen_opt", "codegen_method", "loop_unrolling", "loop_vectorization", "slp_vectorization",
    "inlining_threshold", "ptxas_opt", "max_registers", "cache_mode", "fast_math",
)  # fmt: skip


def utc_now() -> str:
    """The current time as UTC ISO 8601."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


# -- recordings and backends -------------------------------------------------------------------


def load_recording(record_db: Any):
    """A RecordedExecution from a path (a database file, or a folder holding exactly one)."""
    from mneme.core.records import RecordedExecution

    if isinstance(record_db, RecordedExecution):
        return record_db
    path = Path(record_db)
    if path.is_dir():
        candidates = sorted(p for p in path.glob("*.json") if not p.name.startswith("."))
        candidates = [p for p in candidates if _looks_like_database(p)]
        if len(candidates) != 1:
            names = ", ".join(p.name for p in candidates) or "none"
            raise UsageError(f"{path}: expected one recording database (*.json) in the folder, found {names}; "
                             "name the database file")  # fmt: skip
        path = candidates[0]
    return RecordedExecution.from_json(path)


def _looks_like_database(path: Path) -> bool:
    try:
        head = path.read_text(errors="replace")[:4096]
    except OSError:
        return False
    return '"KernelName"' in head or '"StaticHash"' in head


def resolve_backend(rec, backend: str | Backend | None = None) -> Backend:
    """The backend to replay `rec` on: `backend` if given, else the one it was recorded on.

    A recording made on a GPU backend that is not usable here falls back to the host backend
    when the recording carries IR (host runs the IR of CUDA/HIP kernels).
    """
    from mneme.core import backend as backend_mod

    if isinstance(backend, Backend):
        return backend
    if backend:
        chosen = backend_mod.get_backend(backend)
        availability = chosen.availability()
        if not availability.usable:
            raise UsageError(f"backend {backend!r} is not usable here: {availability.reason}")
        return chosen
    recorded = getattr(rec, "backend", "") or ""
    table = backend_mod.backends()
    if recorded in table:
        chosen = table[recorded]()
        availability = chosen.availability()
        if availability.usable:
            return chosen
        reason = availability.reason
    else:
        reason = f"the {recorded or 'recorded'} backend is not installed"
    if rec.llvm_files and "host" in table:
        log.warning("%s: %s; replaying the kernel's IR on the host backend", rec.path, reason)
        return table["host"]()
    raise UsageError(f"{rec.path}: recorded on backend {recorded!r}, which is not usable here ({reason}), "
                     "and the recording has no IR to replay elsewhere; pass --backend or install the backend")  # fmt: skip


def backend_target(backend: Backend) -> str | None:
    """The IR target a backend preprocesses in; None: the IR's own target (GPU IR on every backend)."""
    return getattr(backend, "preprocess_target", None)


# -- the CPU half: link once, preprocess, compile --------------------------------------------

def link_ir(rec, prune: bool = True, internalize: bool = True):
    """The recording's IR linked into one module for its kernel; cached per recording. Clone before mutating."""
    if not rec.llvm_files:
        raise UsageError(f"{rec.path}: the recording has no LLVM IR; replay it with --mode ptx or --mode cubin")
    return rec.link_llvm_modules(prune=prune, internalize=internalize)


class KernelBuilder:
    """Builds device binaries of one recorded kernel: preprocess -> compile, cached by variant hash."""

    def __init__(self, rec, args: bytes, backend: Backend, arch: str, mode: str = "ir", cache_size: int = 32):
        if mode not in MODES:
            raise UsageError(f"unknown replay mode {mode!r}; use one of {', '.join(MODES)}")
        self.rec = rec
        self.args = bytes(args)
        self.backend = backend
        self.arch = arch
        self.mode = mode
        self._cache: collections.OrderedDict[str, DeviceBinary] = collections.OrderedDict()
        self._by_config: collections.OrderedDict[str, DeviceBinary] = collections.OrderedDict()
        self._cache_size = cache_size

    def link_ir(self, config: ExperimentConfiguration | None = None):
        prune = True if config is None else config.prune
        internalize = True if config is None else config.internalize
        return link_ir(self.rec, prune=prune, internalize=internalize)

    def preprocess(self, config: ExperimentConfiguration):
        from mneme.core import pipeline

        return pipeline.preprocess(
            self.link_ir(config), self.rec.kernel_name, config, args=self.args, arg_layout=self.rec.args,
            target=backend_target(self.backend),
        )  # fmt: skip

    def build(self, config: ExperimentConfiguration) -> DeviceBinary:
        """The device binary of `config` (from the cache when this variant was built before)."""
        if self.mode != "ir":
            return self.recorded_binary(self.mode)
        same = self._by_config.get(config.hash())
        if same is not None:  # the very same configuration: not even preprocessed again
            return _evolve_binary(same, stage_times={})
        pre = self.preprocess(config)
        key = _build_key(pre.variant_hash, config, self.arch)
        cached = self._cache.get(key)
        if cached is not None:  # nothing was optimized or generated this time
            self._cache.move_to_end(key)
            pre.module.close()
            self._remember(config, cached)
            return _evolve_binary(cached, stage_times={"preprocess": pre.seconds})
        try:
            binary = self.backend.compile(pre.module, self.rec.kernel_name, config, self.arch)
        finally:
            pre.module.close()
        stage_times = {"preprocess": pre.seconds, **dict(binary.stage_times)}
        binary = _evolve_binary(binary, stage_times=stage_times, variant_hash=binary.variant_hash or pre.variant_hash)
        self._cache[key] = binary
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        self._remember(config, binary)
        return binary

    def _remember(self, config: ExperimentConfiguration, binary: DeviceBinary) -> None:
        self._by_config[config.hash()] = binary
        while len(self._by_config) > 4 * self._cache_size:
            self._by_config.popitem(last=False)

    def optimized_ir(self, config: ExperimentConfiguration) -> str:
        """The variant's IR after preprocessing and optimization, as text (for --output-ll)."""
        from mneme.core import pipeline

        pre = self.preprocess(config)
        try:
            target = backend_target(self.backend) or pipeline.module_target(pre.module)
            arch = self.arch
            if self.backend.name == "host":  # optimize the GPU IR for the GPU it was written for
                found = re.search(r'"target-cpu"="((?:sm_|gfx)\w+)"', str(pre.module))
                arch = found.group(1) if found else {"nvptx": "sm_90", "amdgpu": "gfx90a"}.get(target)
            pipeline.optimize(pre.module, config, target, arch)
            return str(pre.module)
        finally:
            pre.module.close()

    def recorded_binary(self, mode: str, required: bool = True) -> DeviceBinary | None:
        """The application's own image of the kernel ("ptx" or "cubin" mode); None when absent and not required."""
        if self.backend.name == "host":
            if not required:
                return None
            raise UsageError(f"--mode {mode} needs a GPU backend; the host backend replays IR only (--mode ir)")
        wanted = {"ptx": ("ptx",), "cubin": ("cubin", "hsaco", "elf", "fatbin")}[mode]
        for image in getattr(self.rec, "binary_blobs", ()) or ():
            if image.kind in wanted:
                path = Path(image.path)
                if not path.is_absolute():
                    path = Path(self.rec.folder) / path
                data = path.read_bytes()
                return DeviceBinary(self.backend.name, self.arch, image.kind, self.rec.kernel_name, data,
                                    variant_hash=hashlib.sha256(data).hexdigest())  # fmt: skip
        if not required:
            return None
        raise UsageError(f"{self.rec.path}: the recording has no {mode} image of kernel "
                         f"{self.rec.kernel_name!r}; use --mode ir")  # fmt: skip


def _build_key(variant_hash: str, config: ExperimentConfiguration, arch: str) -> str:
    data = config.to_dict()
    codegen = {name: data[name] for name in _CODEGEN_FIELDS if name in data}
    from mneme.core.types import canonical_json

    return hashlib.sha256(f"{variant_hash}|{arch}|{canonical_json(codegen)}".encode()).hexdigest()


def _evolve_binary(binary: DeviceBinary, **changes) -> DeviceBinary:
    return attrs.evolve(binary, **changes)


# -- the experiment ---------------------------------------------------------------------------


class BaseExecutor:
    """One recording, one kernel instance, one device: runs experiments on the recorded state.

    Parameters
    ----------
    record_db : path of a recording database (or its folder), or a RecordedExecution
    record_id : the instance's dynamic hash; inferred when the recording has one instance
    iterations : timed runs per experiment
    device_id : device index of the backend
    backend : backend name or instance; default: the recorded one (host when that is not usable)
    mode : "ir" (compile the recorded IR), "ptx" or "cubin" (the application's own images)
    warmup : timed runs before the measured ones, reported in `result.warmup_time`
    cache : the state each timed run starts from (`mneme.core.backend.CACHE_STATES`): "flushed"
        (default), "warm", or "primed" (like for like with an application's repeated launches)
    timer : what times the runs, one of the device's `timers` ("auto": the backend's best that
        works here; the CUDA backend's "cupti" reads the kernel's own timestamps, "events" CUDA
        events); `result.timer` names the one that measured
    """

    def __init__(self, record_db, record_id: str | None = None, iterations: int = 3, device_id: int = 0,
                 backend: str | Backend | None = None, mode: str = "ir", warmup: int = 1,
                 cache: str = "flushed", timer: str = "auto"):  # fmt: skip
        if iterations < 1:
            raise UsageError(f"iterations must be >= 1, got {iterations}")
        if mode not in MODES:
            raise UsageError(f"unknown replay mode {mode!r}; use one of {', '.join(MODES)}")
        self.record_db = record_db
        self.record_id = record_id
        self.iterations = iterations
        self.device_id = device_id
        self.mode = mode
        self.warmup = max(0, warmup)
        check_cache_state(cache)
        self.cache = cache
        self.timer = timer
        self._backend_choice = backend
        self.rec = None
        self.instance = None
        self.backend: Backend | None = None
        self.device: Device | None = None
        self.builder: KernelBuilder | None = None
        self.prologue = None
        self.epilogue = None
        self.args = b""
        self.arch = ""
        self.written: list[int] = []  # addresses of the regions the kernel writes
        self._pristine: dict[int, bytes] = {}  # prologue bytes of the written regions
        self._dirty = False
        self._restore_all = False
        self._pristine_dev: dict[int, Any] = {}  # device copies of the written regions' prologue bytes
        self._expected_dev: dict[int, Any] = {}  # device copies of the epilogue regions
        self._expected_host: dict[int, bytes] = {}  # decoded epilogue regions (host-side compare)
        self._loaded: collections.OrderedDict[str, LoadedKernel] = collections.OrderedDict()
        self._region_names: dict[int, str] = {}

    # -- lifetime -------------------------------------------------------------------------
    def __enter__(self) -> BaseExecutor:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def open(self) -> BaseExecutor:
        """Load the recording, open the device, reserve the recorded range, restore the prologue."""
        if self.device is not None:
            return self
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def _open(self) -> None:
        from mneme.core.snapshot import Snapshot

        self.rec = load_recording(self.record_db)
        self.instance = self.rec.select(self.record_id)
        self.backend = resolve_backend(self.rec, self._backend_choice)
        self.prologue = Snapshot.open(self.instance.prologue_path)
        self.epilogue = Snapshot.open(self.instance.epilogue_path, base=self.prologue)
        self.instance.check_prologue(self.prologue)
        self.args = bytes(self.prologue.args)
        self.device = self.backend.open_device(self.device_id)
        self.device.check_timer(self.timer)  # a timer the device lacks is a usage error, not a failed experiment
        self.arch = self.backend.arch(self.device_id)
        self.builder = KernelBuilder(self.rec, self.args, self.backend, self.arch, self.mode)
        if self.mode != "ir":
            self.builder.recorded_binary(self.mode)  # a missing image is a usage error, not a failed experiment
        if self.rec.va_size:
            self.device.reserve(self.rec.va_addr, self.rec.va_size)
        for region in self.prologue.regions:
            self.device.map(region.addr, region.size)
        self.restore()
        prologue_addrs = {r.addr for r in self.prologue.regions}
        for region in self.epilogue.regions:
            if region.addr not in prologue_addrs:  # allocated during the launch: map it too
                self.device.map(region.addr, region.size)
        self.written = written_regions(self.prologue, self.epilogue)
        if not self._open_device_copies():
            self._pristine = {addr: self.prologue.read_region(addr) for addr in self.written if addr in prologue_addrs}
        self._region_names = region_names(self.rec, self.args, self.prologue.regions)
        log.debug("opened %s instance %s on %s: %d regions, %d written", self.rec.path,
                  self.instance.dynamic_hash, self.device_label, len(self.prologue.regions), len(self.written))  # fmt: skip

    def _open_device_copies(self) -> bool:
        """Keep pristine and expected bytes on the device when it can (resets device to device, compare there).

        The pristine copies come from the just-restored regions (device to device) and the
        expected bytes decode from the epilogue straight to the device: no region passes
        through host memory whole. Returns False when the host must keep them.
        """
        device = self.device
        if not all(hasattr(device, name) for name in ("alloc", "copy", "write_snapshot_regions")):
            return False
        prologue_addrs = {r.addr for r in self.prologue.regions}
        try:
            for addr in self.written:
                if addr in prologue_addrs:
                    buffer = device.alloc(self.prologue.region(addr).size)
                    self._pristine_dev[addr] = buffer
                    device.copy(buffer.addr, addr, buffer.size)  # nothing has run since restore()
            if hasattr(device, "compare_regions"):
                for region in self.epilogue.regions:
                    self._expected_dev[region.addr] = device.alloc(region.size)
                device.write_snapshot_regions(self.epilogue, [(a, b.addr) for a, b in self._expected_dev.items()])
            device.synchronize()
        except MnemeError as exc:  # e.g. out of device memory: fall back to host copies
            log.warning("keeping the recorded state on %s failed (%s); resetting and verifying from the host",
                        self.device_label, exc)  # fmt: skip
            for buffer in [*self._pristine_dev.values(), *self._expected_dev.values()]:
                try:
                    device.free(buffer)
                except MnemeError as free_exc:
                    log.debug("freeing a device copy failed: %s", free_exc)
            self._pristine_dev, self._expected_dev = {}, {}
            return False
        return True

    def close(self) -> None:
        self._pristine_dev, self._expected_dev = {}, {}  # owned by the device, freed with it
        for kernel in self._loaded.values():
            try:
                kernel.close()
            except MnemeError as exc:  # closing must release everything else too
                log.debug("unloading a kernel failed: %s", exc)
        self._loaded.clear()
        if self.device is not None:
            self.device.close()
            self.device = None

    # -- information --------------------------------------------------------------------------
    @property
    def device_label(self) -> str:
        if self.device is None:
            return ""
        info = self.device.info
        return f"{info.backend}:{info.index} {info.name}".strip()

    def default_config(self) -> ExperimentConfiguration:
        """The recorded launch as an ExperimentConfiguration."""
        self._check_open()
        inst = self.instance
        return ExperimentConfiguration(grid=inst.grid_dim, block=inst.block_dim, shared_mem=int(inst.shared_mem))

    def link_ir(self, config: ExperimentConfiguration | None = None):
        """The linked root module (cached per process); clone before mutating."""
        self._check_open()
        return self.builder.link_ir(config)

    def build(self, config: ExperimentConfiguration) -> DeviceBinary:
        self._check_open()
        return self.builder.build(config)

    def _check_open(self) -> None:
        if self.device is None:
            raise MnemeError("the executor is not open; use it as a context manager or call open()")

    # -- one experiment ----------------------------------------------------------------------
    def execute(self, config: ExperimentConfiguration, binary: DeviceBinary | None = None,
                before_run: Callable[[], None] | None = None) -> ExperimentResult:  # fmt: skip
        """Run one experiment. `binary` is a prebuilt variant (compile-ahead); otherwise it is built here.

        `before_run` is called once the binary is built, before the device is used (worker pools
        use it to wait for exclusive use of the device).
        """
        self._check_open()
        result = ExperimentResult(start_time=utc_now(), gpu_id=self.device_id, device=self.device_label,
                                  backend=self.backend.name)  # fmt: skip
        try:
            self._execute(config, binary, result, before_run)
        except ExperimentError as exc:
            if exc.kind == "fault":  # e.g. a timed run faulted after verification failed: the fault decides
                result.error_kind = ""  # what happens next (worker pools restart the process on it)
            _fail(result, exc.kind, str(exc))
        except (IRError, UnsupportedError) as exc:
            _fail(result, "compile", str(exc))
        except MnemeError as exc:
            _fail(result, "error", str(exc))
        if result.failed and self._dirty and result.error_kind not in ("compile", "invalid", "load"):
            self._restore_all = True
        result.end_time = utc_now()
        return result

    def _execute(self, config: ExperimentConfiguration, binary: DeviceBinary | None, result: ExperimentResult,
                 before_run: Callable[[], None] | None) -> None:  # fmt: skip
        if not config.is_valid():
            raise ExperimentError(f"invalid configuration for kernel {self.rec.kernel_name!r}: block {config.block} "
                                  f"({config.block.size} threads) with launch bounds max_threads={config.max_threads}",
                                  kind="invalid")  # fmt: skip
        if binary is None:
            try:
                binary = self.builder.build(config)
            except MnemeError as exc:
                raise ExperimentError(f"building kernel {self.rec.kernel_name!r} failed: {exc}", kind="compile") from exc
        _record_build(result, binary)
        if before_run is not None:
            before_run()
        kernel = self._load(binary, result, config)
        _record_resources(result, kernel.resources)
        self._restore_globals(kernel)
        if self._restore_all:  # a faulting or wrong variant may have written anywhere
            self.restore()
            self._restore_all = False
        elif self._dirty:
            self.reset()
        self._dirty = True
        try:
            self.device.launch(kernel, config.grid, config.block, config.shared_mem, self.args)
        except ExperimentError:
            raise
        except MnemeError as exc:
            raise ExperimentError(f"launching kernel {self.rec.kernel_name!r} failed: {exc}", kind="launch") from exc
        result.executed = True
        self._verify(kernel, result)
        times = self.device.time(kernel, config.grid, config.block, config.shared_mem, self.args,
                                 self.warmup + self.iterations, before_each=self.reset, cache=self.cache,
                                 timer=self.timer)  # fmt: skip
        result.timer = self.device.timer_used
        result.warmup_time = list(times[: self.warmup])
        result.exec_time = list(times[self.warmup :])

    def _load(self, binary: DeviceBinary, result: ExperimentResult, config: ExperimentConfiguration) -> LoadedKernel:
        takes_config = "config" in inspect.signature(self.device.load).parameters  # PTX JIT options
        key = hashlib.sha256(binary.data).hexdigest()
        if takes_config:
            key += "|" + "|".join(str(getattr(config, f)) for f in ("ptxas_opt", "max_registers", "cache_mode"))
        kernel = self._loaded.get(key)
        if kernel is not None:
            self._loaded.move_to_end(key)
            return kernel
        start = time.perf_counter()
        try:
            kernel = self.device.load(binary, config=config) if takes_config else self.device.load(binary)
        except ExperimentError:
            raise
        except MnemeError as exc:
            raise ExperimentError(f"loading kernel {self.rec.kernel_name!r} failed: {exc}", kind="load") from exc
        result.load_time = time.perf_counter() - start
        self._loaded[key] = kernel
        while len(self._loaded) > 8:
            _, old = self._loaded.popitem(last=False)
            old.close()
        return kernel

    def _restore_globals(self, kernel: LoadedKernel) -> None:
        for name, data in self.prologue.globals.items():
            self.device.write_global(kernel, name, data)

    def restore(self) -> None:
        """Write every prologue region back to the device, streaming it from the snapshot.

        A device with `write_snapshot_regions` (CUDA) decodes them straight into its pinned
        staging buffers, every region in one pass; others get each region in pieces through
        `write`.
        """
        write_all = getattr(self.device, "write_snapshot_regions", None)
        if write_all is not None:
            write_all(self.prologue)
            return
        for region in self.prologue.regions:
            offset = 0
            for chunk in self.prologue.iter_region(region.addr):
                self.device.write(region.addr + offset, chunk)
                offset += len(chunk)

    def reset(self) -> None:
        """Restore the regions the kernel writes to their recorded prologue contents."""
        if self._pristine_dev:
            for addr, buffer in self._pristine_dev.items():
                self.device.copy(addr, buffer.addr, buffer.size)
            return
        for addr, data in self._pristine.items():
            self.device.write(addr, data)

    def _verify(self, kernel: LoadedKernel, result: ExperimentResult) -> None:
        from mneme.core.snapshot import compare_buffers

        if self._expected_dev:
            try:
                self._verify_on_device(kernel, result)
                return
            except UnsupportedError as exc:  # a policy the device compare cannot apply
                log.debug("comparing on the host: %s", exc)
        if not self._expected_host:  # decoded once: decompressing the epilogue per experiment costs more than a run
            self._expected_host = {r.addr: self.epilogue.read_region(r.addr) for r in self.epilogue.regions}
        reports = [compare_buffers(self._expected_host[r.addr], self.device.read(r.addr, r.size), r.policy, addr=r.addr)
                   for r in self.epilogue.regions]  # fmt: skip
        self._conclude_verification(kernel, result, describe_mismatches(_Report(reports), self._region_names))

    def _conclude_verification(self, kernel: LoadedKernel, result: ExperimentResult, lines: list[str]) -> None:
        """Add the device globals' comparison to the regions' and record the verdict."""
        for name, data in self.epilogue.globals.items():
            if self.device.read_global(kernel, name, len(data)) != data:
                lines.append(f"global {name} differs")
        result.verified = not lines
        if lines:
            result.mismatches = lines
            _fail(result, "verify", f"kernel {self.rec.kernel_name!r} did not reproduce the recorded epilogue: "
                  + "; ".join(lines[:4]))  # fmt: skip

    def _verify_on_device(self, kernel: LoadedKernel, result: ExperimentResult) -> None:
        requests = [_CompareRequest(self._expected_dev[r.addr].addr, r.addr, r.size, None if r.policy.exact else r.policy)
                    for r in self.epilogue.regions]  # fmt: skip
        diffs = self.device.compare_regions(requests)
        self._conclude_verification(kernel, result, describe_mismatches(_Report(diffs), self._region_names))

    def optimized_ir(self, config: ExperimentConfiguration) -> str:
        self._check_open()
        return self.builder.optimized_ir(config)

    def recorded_binary(self) -> DeviceBinary | None:
        """The application's own machine code (else its PTX) for a speed baseline; None when there is none."""
        self._check_open()
        return self.builder.recorded_binary("cubin", required=False) or self.builder.recorded_binary(
            "ptx", required=False)


@attrs.frozen
class _CompareRequest:
    """One region for a device-side compare: expected bytes at `expected`, the kernel's at `actual`."""

    expected: int
    actual: int
    size: int
    policy: Any = None


@attrs.frozen
class _Report:
    regions: list


def _fail(result: ExperimentResult, kind: str, message: str) -> None:
    result.failed = True
    if not result.error_kind:
        result.error_kind = kind
        result.error = message
    log.info("experiment failed (%s): %s", kind, message)


def _record_build(result: ExperimentResult, binary: DeviceBinary) -> None:
    stages = binary.stage_times or {}
    result.preprocess_ir_time = float(stages.get("preprocess", 0.0))
    result.opt_time = float(stages.get("optimize", 0.0))
    # Other lowering stages (the host backend's retarget, ptxas, linking) count as code generation.
    result.codegen_time = sum(float(v) for k, v in stages.items() if k not in ("preprocess", "optimize", "cache"))
    result.obj_size = len(binary.data)
    result.variant_hash = binary.variant_hash


def _record_resources(result: ExperimentResult, resources: Resources) -> None:
    result.reg_usage = resources.registers
    result.local_mem_usage = resources.local_mem
    result.const_mem_usage = resources.const_mem
    result.shared_mem_usage = resources.shared_mem
    result.spill_stores = resources.spill_stores
    result.spill_loads = resources.spill_loads


# -- region bookkeeping -------------------------------------------------------------------------


def written_regions(prologue, epilogue) -> list[int]:
    """Addresses of the regions whose epilogue contents differ from the prologue (or that are new)."""
    before = {r.addr: r for r in prologue.regions}
    written = []
    for region in epilogue.regions:
        base = before.get(region.addr)
        if base is None or base.size != region.size:
            written.append(region.addr)
            continue
        runs = epilogue.changed_runs(region.addr) if hasattr(epilogue, "changed_runs") else None
        if runs is not None:  # a diff region: its run table says it, without decoding either side
            if runs:
                written.append(region.addr)
            continue
        chunks_a = prologue.iter_region(region.addr)
        chunks_b = epilogue.iter_region(region.addr)
        if _stream_bytes(chunks_a) != _stream_bytes(chunks_b):
            written.append(region.addr)
    return written


def _stream_bytes(chunks) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def pointer_args(rec, args: bytes) -> dict[int, int]:
    """Argument index -> pointer value of the recording's pointer arguments."""
    values = {}
    for index, arg in enumerate(rec.args):
        if arg.kind == "pointer" and arg.size == 8 and arg.offset + 8 <= len(args):
            values[index] = struct.unpack_from("<Q", args, arg.offset)[0]
    return values


def region_names(rec, args: bytes, regions) -> dict[int, str]:
    """Region address -> a readable name ("arg 3 (y)") for regions that kernel arguments point into."""
    names = {}
    pointers = pointer_args(rec, args)
    for region in regions:
        for index, value in pointers.items():
            if region.addr <= value < region.addr + region.size:
                arg_name = rec.args[index].name
                names[region.addr] = f"arg {index}" + (f" ({arg_name})" if arg_name else "")
                break
    return names


def region_of_arg(rec, args: bytes, regions, index: int) -> int:
    """The address of the region argument `index` points into, or a UsageError saying why not."""
    if not 0 <= index < len(rec.args):
        raise UsageError(f"{rec.path}: kernel {rec.kernel_name!r} has {len(rec.args)} arguments; no argument {index}")
    pointers = pointer_args(rec, args)
    if index not in pointers:
        raise UsageError(f"{rec.path}: argument {index} of kernel {rec.kernel_name!r} is not a pointer")
    value = pointers[index]
    for region in regions:
        if region.addr <= value < region.addr + region.size:
            return region.addr
    raise UsageError(f"{rec.path}: argument {index} points to 0x{value:x}, outside every recorded region")


def describe_mismatches(report, names: Mapping[int, str] | None = None) -> list[str]:
    """One line per differing region or global: where, how many bytes, how far off."""
    lines = []
    for region in report.regions:
        if region.ok:
            continue
        addr = getattr(region, "addr", getattr(region, "actual", None))  # RegionDiff of a device compare
        label = getattr(region, "name", None) or (f"region 0x{addr:x}" if isinstance(addr, int) else str(addr))
        if names and addr in names:
            label += f" [{names[addr]}]"
        parts = [f"{label} ({region.size} B): {region.differing_bytes} bytes differ"]
        if region.first_offset is not None and region.first_offset >= 0:
            parts.append(f"first at +{region.first_offset}")
        if getattr(region, "max_abs", None):
            parts.append(f"max abs error {region.max_abs:.3g}")
        if getattr(region, "max_rel", None):
            parts.append(f"max rel error {region.max_rel:.3g}")
        if getattr(region, "nan_mismatch", False):
            parts.append("NaN mismatch")
        lines.append(", ".join(parts))
    for entry in getattr(report, "globals", None) or ():
        if not getattr(entry, "ok", True):
            lines.append(entry.describe() if hasattr(entry, "describe") else f"global {entry.name} differs")
    return lines


# -- the worker process (the seed's TuneWorker) ------------------------------------------------


def tune_worker_main(conn, spec: dict[str, Any], log_path: str) -> None:
    """Entry point of a worker process: open once, signal readiness, then serve messages.

    Messages in: ``{"payload": "process", "exp_id", "data": config dict, "binary": DeviceBinary | None}``,
    ``{"payload": "compile", "exp_id", "data": config dict}`` (compile workers) and
    ``{"payload": "terminate"}``. Out: ``{"payload": "ready", ...}`` once, then per message
    ``{"exp_id", "payload": "result", "data": result dict}`` or ``{"exp_id", "payload": "binary",
    "data": DeviceBinary | None, "result": result dict}``.
    """
    _redirect_output(log_path)
    limits.restrict_worker()  # no core dumps, no new privileges (docs/security.md)
    role = spec.get("role", "device")
    log.info("worker %s starting: pid %d, role %s, spec %s", spec.get("name"), os.getpid(), role, spec)
    try:
        if role == "compile":
            server = _CompileServer(spec)
        else:
            server = _DeviceServer(spec)
    except BaseException as exc:  # tell the parent why before exiting
        log.exception("worker startup failed")
        try:
            # A MnemeError (bad recording, unusable backend) repeats on every retry: say so.
            conn.send({"payload": "error", "error": f"{type(exc).__name__}: {exc}", "fatal": isinstance(exc, MnemeError)})
        finally:
            conn.close()
        os._exit(3)
    conn.send({"payload": "ready", "pid": os.getpid(), **server.info()})
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message.get("payload") == "terminate":
            break
        config_data = message.get("data") or {}
        try:
            config = ExperimentConfiguration.from_dict(config_data)
        except MnemeError as exc:
            result = ExperimentResult(failed=True, error_kind="invalid", error=str(exc))
            conn.send({"exp_id": message.get("exp_id"), "payload": "result", "data": result.to_dict()})
            continue
        reply = server.serve(message, config, conn)
        conn.send({"exp_id": message.get("exp_id"), **reply})
    server.close()
    conn.close()
    logging.shutdown()


def _redirect_output(log_path: str) -> None:
    """Send this process's stdout, stderr (native ones too: LLVM aborts) and logging to the log file."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


class _DeviceServer:
    def __init__(self, spec: dict[str, Any]):
        self.executor = BaseExecutor(spec["record_db"], spec.get("record_id"), iterations=spec.get("iterations", 3),
                                     device_id=spec.get("device_id", 0), backend=spec.get("backend"),
                                     mode=spec.get("mode", "ir"), warmup=spec.get("warmup", 1),
                                     cache=spec.get("cache", "flushed"),
                                     timer=spec.get("timer", "auto")).open()  # fmt: skip
        if spec.get("mode", "ir") == "ir":
            self.executor.link_ir()  # link once, before the first experiment

    def info(self) -> dict[str, Any]:
        ex = self.executor
        return {"device": ex.device_label, "arch": ex.arch, "backend": ex.backend.name,
                "default_config": ex.default_config().to_dict(), "kernel": ex.rec.kernel_name}  # fmt: skip

    def serve(self, message: dict[str, Any], config: ExperimentConfiguration, conn) -> dict[str, Any]:
        before_run = None
        if message.get("exclusive"):  # another worker shares the device: ask the pool for it, wait for "go"

            def before_run() -> None:
                conn.send({"exp_id": message.get("exp_id"), "payload": "acquire"})
                answer = conn.recv()
                if answer.get("payload") != "go":
                    raise ExperimentError(f"worker expected 'go' from the pool, got {answer!r}")

        result = self.executor.execute(config, binary=message.get("binary"), before_run=before_run)
        return {"payload": "result", "data": result.to_dict()}

    def close(self) -> None:
        self.executor.close()


class _CompileServer:
    def __init__(self, spec: dict[str, Any]):
        from mneme.core import backend as backend_mod
        from mneme.core.snapshot import Snapshot

        self.rec = load_recording(spec["record_db"])
        instance = self.rec.select(spec.get("record_id"))
        backend = spec.get("backend")
        self.backend = backend_mod.get_backend(backend) if backend else resolve_backend(self.rec)
        args = Snapshot.open(instance.prologue_path).args
        self.builder = KernelBuilder(self.rec, args, self.backend, spec["arch"], spec.get("mode", "ir"))
        self.builder.link_ir()

    def info(self) -> dict[str, Any]:
        return {"arch": self.builder.arch, "backend": self.backend.name, "kernel": self.rec.kernel_name}

    def serve(self, message: dict[str, Any], config: ExperimentConfiguration, conn) -> dict[str, Any]:
        result = ExperimentResult(start_time=utc_now(), backend=self.backend.name)
        try:
            binary = self.builder.build(config)
        except MnemeError as exc:
            _fail(result, "compile", f"building kernel {self.rec.kernel_name!r} failed: {exc}")
            result.end_time = utc_now()
            return {"payload": "binary", "data": None, "result": result.to_dict()}
        return {"payload": "binary", "data": binary, "result": None}

    def close(self) -> None:
        pass
