"""The target-neutral stages of a build: preprocess (transforms) and optimize (pass pipelines).

`preprocess` clones the module and runs the transform pipeline: the hook
``mneme_transform_module`` over a `ModuleBuild`, whose core implementation runs the named
transforms (plugins of kind "transform") the configuration enables, in their `order`; plugins
order themselves around it with ``tryfirst``/``trylast`` or wrap it. Each step updates the
variant hash. `optimize` runs an LLVM pipeline (`default<O3>`, a sequence of `PASSES`, or any
pipeline text LLVM's own parser accepts, `function(loop-mssa(licm)),gvn<no-pre>`: see
`mneme.core.pass_registry`) in place, with
the target machine the backend gives. Code generation is the backend's (`Backend.compile`);
`mneme.core.build.compile` runs the stages through the build cache.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import re
import threading
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import llvmlite.binding as llvm

from mneme.core import ir, pass_registry, plugins, targets
from mneme.core.errors import IRError, UsageError
from mneme.core.passes import PASSES  # apart, so that listing the passes loads no LLVM
from mneme.core.types import ExperimentConfiguration

log = logging.getLogger(__name__)

# -- targets -----------------------------------------------------------------------------------


def triple_target(triple: str) -> str:
    """LLVM's name of the target of a triple, as the backends declare it (`Backend.ir_targets`); "host" for any CPU."""
    return targets.target_of_triple(triple) or "host"


def module_target(mod: llvm.ModuleRef) -> str:
    """The LLVM target of a module's triple (see `triple_target`)."""
    return triple_target(mod.triple or "")


def prepare_codegen(module: llvm.ModuleRef, kernel_name: str, target: str, machine: llvm.TargetMachine) -> None:
    """Check an optimized module before a backend generates code for `target` with `machine`.

    The kernel must be defined and the module valid IR of that target; its triple and data layout
    become the machine's (a back end may be newer than the front end that wrote the IR).
    """
    if module_target(module) != target:
        raise IRError(
            f"module {module.name!r} targets {module.triple or 'no triple'}, not {machine.triple}; "
            f"compile it for its own target (arch) instead"
        )
    ir.find_kernel(module, kernel_name)
    ir.verify(module, f"module of kernel {kernel_name!r} before code generation")
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)


# -- transforms --------------------------------------------------------------------------------


@attrs.define
class TransformContext:
    """What a transform may read: the kernel, the configuration and the recorded arguments.

    `args` is the packed argument buffer (the snapshot's), `arg_layout` the recording's
    per-argument description (objects with `offset`, `size`, `kind`, `specializable`), or
    None to use the IR's own layout. `specialize_indexes` restricts argument specialization.
    """

    kernel_name: str
    config: ExperimentConfiguration
    target: str
    args: bytes | None = None
    arg_layout: Sequence[Any] | None = None
    specialize_indexes: Sequence[int] | None = None
    extra: frozenset[str] = frozenset()


class Transform(abc.ABC):
    """An IR transform plugin. Subclasses set `name` and `order` and implement `enabled`/`apply`.

    `apply(module, variant_hash, ctx)` returns `(module, new_variant_hash)`; it may mutate
    `module` in place or return a new one (then it leaves the old one to the caller).
    """

    name: ClassVar[str]
    order: ClassVar[int] = 100
    description: ClassVar[str] = ""

    def enabled(self, ctx: TransformContext) -> bool:
        return self.name in ctx.extra

    @abc.abstractmethod
    def apply(self, module: llvm.ModuleRef, variant_hash: str, ctx: TransformContext) -> tuple[llvm.ModuleRef, str]:
        """Transform the kernel's module; return it and the updated variant hash."""


def transforms() -> dict[str, type[Transform]]:
    """Name -> transform class, from the plugins."""
    return plugins.registry("transform")


@attrs.define
class Preprocessed:
    module: llvm.ModuleRef
    variant_hash: str
    seconds: float
    applied: list[str] = attrs.field(factory=list)


@attrs.define
class ModuleBuild:
    """The module going through the transform pipeline (hook ``mneme_transform_module``).

    A step mutates `module` in place and calls `changed(name, salt)`, or hands a new module to
    `replace(module, name, salt)`; either way the variant hash takes in the step's name and
    `salt` (what else decides its output, e.g. its own options), so equal builds keep equal hashes.
    """

    module: llvm.ModuleRef
    variant_hash: str
    ctx: TransformContext
    applied: list[str] = attrs.field(factory=list)

    def changed(self, name: str, salt: str = "") -> None:
        self.variant_hash = ir.combine_hash(self.variant_hash, name, salt)
        self.applied.append(name)

    def replace(self, module: llvm.ModuleRef, name: str, salt: str = "") -> None:
        if module is not self.module:
            self.module.close()
            self.module = module
        self.changed(name, salt)

    def run_named(self) -> None:
        """The named transforms `ctx` enables, in their `order` (the core's step of the pipeline)."""
        for cls in sorted(transforms().values(), key=lambda c: (c.order, c.name)):
            transform = cls()
            if not transform.enabled(self.ctx):
                continue
            new_mod, self.variant_hash = transform.apply(self.module, self.variant_hash, self.ctx)
            if new_mod is not self.module:
                self.module.close()
                self.module = new_mod
            self.applied.append(cls.name)


def pipeline_plugins() -> list[str]:
    """Plugins other than the core's that take part in the transform pipeline (they decide builds too)."""
    impls = plugins.hook().mneme_transform_module.get_hookimpls()
    return sorted(impl.plugin_name for impl in impls if impl.plugin_name not in plugins.CORE_PLUGINS)


def preprocess(
    module: llvm.ModuleRef,
    kernel_name: str,
    config: ExperimentConfiguration,
    args: bytes | None = None,
    arg_layout: Sequence[Any] | None = None,
    target: str | None = None,
    *,
    specialize_indexes: Sequence[int] | None = None,
    extra_transforms: Sequence[str] = (),
    base_hash: str | None = None,
) -> Preprocessed:
    """Clone `module` and run the transform pipeline over the clone; the input is left untouched.

    `extra_transforms` names transforms to run that no configuration field enables
    (e.g. "remove_auto_init"). `base_hash` skips hashing the input when the caller knows it.
    """
    start = time.perf_counter()
    target = target or module_target(module)
    ir.find_kernel(module, kernel_name)
    table = transforms()
    unknown = [t for t in extra_transforms if t not in table]
    if unknown:
        raise UsageError(f"unknown transform(s) {', '.join(unknown)}; known: {', '.join(sorted(table))}")
    ctx = TransformContext(
        kernel_name, config, target, args, arg_layout, specialize_indexes, frozenset(extra_transforms)
    )
    build = ModuleBuild(ir.clone(module), base_hash or ir.module_hash(module), ctx)
    try:
        plugins.hook().mneme_transform_module(build=build)
    except BaseException:
        build.module.close()
        raise
    log.debug(
        "preprocessed %s: %s -> %s", kernel_name, ", ".join(build.applied) or "no transforms", build.variant_hash[:12]
    )
    return Preprocessed(build.module, build.variant_hash, time.perf_counter() - start, build.applied)


# -- optimization pipelines --------------------------------------------------------------------


_PLAIN_NAME = re.compile(r"^[A-Za-z0-9-]+$")  # a pass name alone, no adaptor or parameters
_DEFAULT = re.compile(r"^default<O([0-3sz])>$|^O([0-3sz])$")
# llvmlite 0.50 builds LLVM's per-module default pipeline from a speed level only; Os and Oz
# are that of O2 with unrolling and vectorization off and LLVM's size inlining thresholds.
_SIZE_LEVELS = {"s": 75, "z": 25}
# llvmlite 0.50 stores PipelineTuningOptions' inliner threshold truncated to 8 bits (500 reads back 244);
# a larger threshold goes through LLVM's own -inline-threshold option instead (see `_inline_option`).
MAX_INLINING_THRESHOLD = 255
# The thresholds LLVM's default pipelines use when none is given: O3, Os, Oz, else (O1, O2).
_LEVEL_INLINING_THRESHOLDS = {"3": 250, "s": 75, "z": 25}
_DEFAULT_INLINING_THRESHOLD = 225


@attrs.frozen
class Pipeline:
    """A parsed optimization pipeline: `default<Ox>` (level), a sequence of `PASSES`, or LLVM pipeline text."""

    level: str | None = None  # "0".."3", "s", "z"
    passes: tuple[str, ...] = ()
    text: str | None = None  # LLVM's own syntax, checked by LLVM's parser (adaptors, parameters)

    @property
    def empty(self) -> bool:
        return self.level is None and not self.passes and not self.text

    def __str__(self) -> str:
        if self.level is not None:
            return f"default<O{self.level}>"
        if self.text is not None:
            return self.text
        return ",".join(self.passes)


def parse_pipeline(text: str) -> Pipeline:
    """Parse `default<O3>` (or `O3`, `Os`, `Oz`), a comma-separated pass list, or "" (no passes).

    A list of `PASSES` names runs through llvmlite's pass methods; any other text is LLVM's
    pipeline syntax (every pass LLVM registers, adaptors such as `function(...)`, parameters
    such as `simplifycfg<bonus-inst-threshold=4>`), which LLVM's parser checks here. What it
    refuses raises `UsageError` with LLVM's reason and the known simple names.
    """
    text = (text or "").strip()
    if not text:
        return Pipeline()
    match = _DEFAULT.match(text)
    if match:
        return Pipeline(level=match.group(1) or match.group(2))
    names = [p.strip() for p in text.split(",")]
    unknown = [p for p in names if p not in PASSES]
    if unknown and all(names) and pass_registry.available():
        nested = _nested(names)
        if nested is not None:  # plain names: each in its level's adaptors (LLVM's own guess would run
            return Pipeline(text=nested)  # every name at the first one's level, and LICM without MemorySSA)
        _check_memory_ssa(text)
        try:
            pass_registry.check_pipeline(text)
        except UsageError as exc:
            llvm_names = set(pass_registry.pass_names())
            missing = [n for n in unknown if _PLAIN_NAME.match(n) and n not in llvm_names]
            what = f"unknown pass {', '.join(map(repr, missing))} in pipeline {text!r}" if missing else str(exc)
            raise UsageError(
                f"{what}; use default<O0|O1|O2|O3|Os|Oz>, LLVM's pipeline syntax (`mneme ir passes "
                "--llvm` lists LLVM's passes) or a comma-separated list of the known passes: "
                f"{', '.join(sorted(PASSES))}"
            ) from None
        return Pipeline(text=text)
    if unknown or not all(names):
        bad = ", ".join(repr(p) for p in unknown) or "an empty pass name"
        raise UsageError(
            f"unknown pass {bad} in pipeline {text!r}; use default<O0|O1|O2|O3|Os|Oz> or a comma-separated "
            f"list of: {', '.join(sorted(PASSES))}"
        )
    return Pipeline(passes=tuple(names))


def _check_memory_ssa(text: str) -> None:
    """Refuse LICM outside `loop-mssa(...)`: LLVM parses it but then stops the process with a fatal error."""
    depth_names: list[str] = []
    token = ""
    for ch in text + ",":
        if ch == "(":
            depth_names.append(token.split("<")[0].strip())
            token = ""
        elif ch in "),":
            name = token.split("<")[0].strip()
            if name in pass_registry.NEEDS_MEMORY_SSA and "loop-mssa" not in depth_names:
                raise UsageError(
                    f"pass {name!r} in pipeline {text!r} needs MemorySSA: write it inside "
                    f"loop-mssa(...), e.g. function(loop-mssa({name}))"
                )
            token = ""
            if ch == ")" and depth_names:
                depth_names.pop()
        else:
            token += ch


def _nested(names: list[str]) -> str | None:
    """`gvn,globalopt` as `function<eager-inv>(gvn),globalopt` when every name is a registered pass; else None."""
    if not all(_PLAIN_NAME.match(n) for n in names):
        return None
    try:
        text = pass_registry.nest([(n, pass_registry.level_of(n)) for n in names])
        pass_registry.check_pipeline(text)
    except UsageError:
        return None  # an unknown name: the caller reports it
    return text


def tuning_options(config: ExperimentConfiguration, pipeline: Pipeline) -> llvm.PipelineTuningOptions:
    level = pipeline.level or "2"
    speed = int(level) if level.isdigit() else 2
    pto = llvm.create_pipeline_tuning_options(speed_level=speed)
    if level in _SIZE_LEVELS:
        pto.loop_unrolling = False
        pto.loop_vectorization = False
        pto.slp_vectorization = False
        pto.inlining_threshold = _SIZE_LEVELS[level]
    if config.loop_unrolling is not None:
        pto.loop_unrolling = config.loop_unrolling
    if config.loop_vectorization is not None:
        pto.loop_vectorization = config.loop_vectorization
    if config.slp_vectorization is not None:
        pto.slp_vectorization = config.slp_vectorization
    if config.inlining_threshold is not None and config.inlining_threshold <= MAX_INLINING_THRESHOLD:
        pto.inlining_threshold = config.inlining_threshold
    return pto


def inlining_threshold(config: ExperimentConfiguration, pipeline: Pipeline) -> int:
    """The inliner threshold a `default<Ox>` build uses: the configuration's, else LLVM's for the level."""
    if config.inlining_threshold is not None:
        return config.inlining_threshold
    return _LEVEL_INLINING_THRESHOLDS.get(pipeline.level or "2", _DEFAULT_INLINING_THRESHOLD)


_inline_lock = threading.Lock()
_inline_option_set: list[int] = []  # the value last given to LLVM's -inline-threshold, once one was


def _inline_option(config: ExperimentConfiguration, pipeline: Pipeline) -> None:
    """Give LLVM's -inline-threshold option the build's threshold when the tuning options cannot carry it.

    The option is process-wide and, once given, overrides every later pipeline's threshold, so from
    then on each build sets it to its own threshold (call with `_inline_lock` held, before building).
    """
    threshold = inlining_threshold(config, pipeline)
    if threshold <= MAX_INLINING_THRESHOLD and not _inline_option_set:
        return  # the tuning options carry it; LLVM's option was never given
    if _inline_option_set and _inline_option_set[-1] == threshold:
        return
    if not _inline_option_set:
        log.info(
            "inlining threshold %d is above the %d llvmlite's tuning options hold: setting LLVM's "
            "-inline-threshold for this process from now on",
            threshold,
            MAX_INLINING_THRESHOLD,
        )
    llvm.set_option("mneme", f"-inline-threshold={threshold}")
    # once -inline-threshold is given LLVM sets the cold-callee threshold only when asked: keep its default
    llvm.set_option("mneme", "-inlinecold-threshold=45")
    _inline_option_set[:] = [threshold]


# LLVM's loop unroller reads -unroll-threshold each time it runs; its own default by level otherwise.
_LEVEL_UNROLL_THRESHOLDS = {"3": 300}
_DEFAULT_UNROLL_THRESHOLD = 150
_unroll_lock = threading.Lock()
_unroll_option_set: list[int] = []  # the value last given to LLVM's -unroll-threshold, once one was


def unroll_threshold(config: ExperimentConfiguration, pipeline: Pipeline) -> int:
    """The full-unrolling threshold a build uses: the configuration's, else LLVM's for the level."""
    wanted = getattr(config, "unroll_threshold", None)
    if wanted is not None:
        return wanted
    level = pipeline.level or ("3" if "O3" in (pipeline.text or "") else "2")
    return _LEVEL_UNROLL_THRESHOLDS.get(level, _DEFAULT_UNROLL_THRESHOLD)


@contextlib.contextmanager
def _unroll_option(config: ExperimentConfiguration, pipeline: Pipeline):
    """Hold LLVM's process-wide -unroll-threshold at the build's value while its passes run.

    Untouched (and no lock taken) until a configuration first asks for a threshold; from then on
    every build sets its own, its level's default when it asks for none, and builds run one at a time.
    """
    if getattr(config, "unroll_threshold", None) is None and not _unroll_option_set:
        yield
        return
    with _unroll_lock:
        threshold = unroll_threshold(config, pipeline)
        if not _unroll_option_set or _unroll_option_set[-1] != threshold:
            llvm.set_option("mneme", f"-unroll-threshold={threshold}")
            _unroll_option_set[:] = [threshold]
        yield


def optimize(module: llvm.ModuleRef, config: ExperimentConfiguration, machine: llvm.TargetMachine) -> float:
    """Run the configuration's pipeline on `module` in place; returns the seconds it took.

    `machine` is the backend's target machine for the module's target and architecture
    (`Backend.target_machine`). An empty pipeline does nothing.
    """
    start = time.perf_counter()
    pipeline = parse_pipeline(config.passes)
    if pipeline.empty:
        return 0.0
    target = triple_target(machine.triple)
    check_codegen_opt(config.codegen_opt)
    check_module_target(module, target)
    if target != "host":  # the back end's own data layout (LLVM 22's may be newer than the front end's)
        module.data_layout = str(machine.target_data)
    pto = tuning_options(config, pipeline)
    pb = llvm.create_pass_builder(machine, pto)
    if pipeline.level is not None:
        with _inline_lock:  # the inliner reads the threshold when the pipeline is built
            _inline_option(config, pipeline)
            pm = pb.getModulePassManager()
    elif pipeline.text is not None:
        pm = llvm.create_new_module_pass_manager()
        pass_registry.parse_into(pb, pm, pipeline.text)
    else:
        pm = llvm.create_new_module_pass_manager()
        for name in pipeline.passes:
            PASSES[name][0](pm)
    with _unroll_option(config, pipeline):  # the unroller reads its threshold as it runs
        pm.run(module, pb)
    if pipeline.level is None:
        ir.verify(module, f"module after pipeline {pipeline}")
    return time.perf_counter() - start


_FOREIGN_CPU = re.compile(r'"target-cpu"="(sm_\d+\w*|gfx[0-9a-f]+)"')


def check_module_target(module: llvm.ModuleRef, target: str) -> None:
    """Refuse to run a target's passes on another target's IR (LLVM would abort the process)."""
    have = module_target(module)
    if target == "host":
        if have != "host":
            raise IRError(
                f"module {module.name!r} targets {module.triple}; retarget it to the host (triple, data "
                "layout, no target-cpu/target-features) before optimizing it for the host"
            )
        foreign = _FOREIGN_CPU.search(str(module))
        if foreign:
            raise IRError(
                f"module {module.name!r} still carries device attribute {foreign.group(0)}; remove "
                "target-cpu and target-features from its functions before optimizing it for the host"
            )
    elif have != target:
        raise IRError(
            f"module {module.name!r} targets {module.triple or 'no triple'}, not {target}; "
            "optimize it for its own target"
        )


def check_codegen_opt(level: int) -> None:
    if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= 3:
        raise ValueError(f"codegen_opt must be an integer 0..3 (LLVM's codegen levels), not {level!r}")


__all__ = [
    "PASSES",
    "Pipeline",
    "Preprocessed",
    "Transform",
    "TransformContext",
    "check_codegen_opt",
    "check_module_target",
    "module_target",
    "optimize",
    "inlining_threshold",
    "parse_pipeline",
    "preprocess",
    "unroll_threshold",
    "ModuleBuild",
    "pipeline_plugins",
    "transforms",
    "triple_target",
    "tuning_options",
]
