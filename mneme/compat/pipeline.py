"""`mneme.pipeline` of the original Mneme API: LLVM's passes as objects, and pipelines made of them.

The passes are those LLVM's new pass manager registers, read from the LLVM that compiles the
code (`mneme.core.pass_registry`), each with its level (module, CGSCC, function, loop nest,
loop) and its parameters; `PipelineManager.get_passes()` lists the ones worth tuning (not the
printers, verifiers, instrumentation, or lowering for other platforms: see `EXCLUDED`).
`to_string` nests passes in LLVM's adaptors (`function<eager-inv>(...)`, `loop(...)`,
`loop-mssa(...)`, `cgscc(...)`) as the original does, and `from_string` reads that syntax back.
"""

from __future__ import annotations

import enum
import random
import re
from collections.abc import Sequence
from typing import Any

from mneme.compat.errors import as_runtime_error
from mneme.core.pass_registry import NEEDS_MEMORY_SSA  # loop passes LLVM runs only with MemorySSA
from mneme.core.errors import UsageError as _CoreUsageError


def UsageError(message: str) -> Exception:  # noqa: N802 - raised like a class
    """The core's `UsageError`, also a `RuntimeError` (what the original raises for an unknown pass)."""
    return as_runtime_error(_CoreUsageError(message))


#: Families of registered passes that are not optimizations of a replayed kernel: analyses
#: printers and viewers, verifiers, debug-info and profile tools, sanitizers and other
#: instrumentation, exception handling, garbage collection, coroutines and Objective-C
#: runtimes, link-time (ThinLTO) steps, lowering that only a code generator runs (select-optimize
#: stops LLVM without the code generator's profile summary), passes that undo optimization
#: (reg2mem), and Mneme's own transforms (internalize). A pass matches when its name starts with
#: an entry. tests/compat/test_pipeline.py runs every remaining pass on a kernel with loops.
EXCLUDED = (
    "print",
    "dot-",
    "view-",
    "verify",
    "debugify",
    "check-debugify",
    "trigger-",
    "no-op-",
    "invalidate",
    "helloworld",
    "count-visits",
    "instcount",
    "instnamer",
    "metarenamer",
    "aa-eval",
    "pa-eval",
    "annotation",
    "transform-warning",
    "func-properties-stats",
    "kernel-info",
    "lint",
    "normalize",
    "prof-",
    "pgo-",
    "ctx-",
    "memprof",
    "instrprof",
    "insert-gcov",
    "pseudo-probe",
    "sample-profile",
    "cg-profile",
    "strip",
    "asan",
    "msan",
    "tsan",
    "hwasan",
    "dfsan",
    "nsan",
    "rtsan",
    "tysan",
    "sancov",
    "sanmd",
    "alloc-token",
    "bounds-checking",
    "ee-instrument",
    "jmc-",
    "kcfi",
    "cfguard",
    "cross-dso-cfi",
    "stack-protector",
    "safe-stack",
    "lower-allow-check",
    "select-optimize",
    "coro-",
    "objc-",
    "dxil-",
    "hipstdpar-",
    "openmp-opt",
    "dwarf-eh",
    "sjlj-eh",
    "win-eh",
    "wasm-eh",
    "gc-lowering",
    "shadow-stack-gc",
    "place-safepoints",
    "rewrite-statepoints",
    "function-import",
    "thinlto",
    "lto",
    "fatlto",
    "default",
    "function-simplification",
    "inliner-ml",
    "scc-oz-module-inliner",
    "embed-bitcode",
    "extract-blocks",
    "loop-extract",
    "name-anon-globals",
    "internalize",
    "lower-emutls",
    "lower-global-dtors",
    "lower-ifunc",
    "lowertypetests",
    "simplify-type-tests",
    "wholeprogramdevirt",
    "expand-",
    "assign-guid",
    "noinline-nonprevailing",
    "declare-runtime-libcalls",
    "norecurse-lto",
    "rewrite-symbols",
    "elim-avail-extern",
    "canonicalize-aliases",
    "codegenprepare",
    "callbr-prepare",
    "atomic-expand",
    "pre-isel",
    "indirectbr-expand",
    "interleaved-",
    "complex-deinterleaving",
    "scalarize-masked",
    "free-machine-function",
    "replace-with-veclib",
    "inject-tli-mappings",
    "unreachableblockelim",
    "typepromotion",
    "structurizecfg",
    "fix-irreducible",
    "unify-loop-exits",
    "reg2mem",
    "global-merge-func",
    "globalsplit",
    "guard-widening",
    "make-guards-explicit",
    "lower-guard-intrinsic",
    "lower-widenable-condition",
    "loop-predication",
    "declare-to-assign",
    "redundant-dbg-inst-elim",
    "add-discriminators",
    "sandbox-vectorizer",
    "extra-",
    "lower-invoke",
    "libcalls-shrinkwrap",
    "forceattrs",
    "hardware-loops",
    "move-auto-init",
    "recompute-globalsaa",
    "module-inline",
    "inliner-wrapper",
    "memprof-",
)


class PassLevel(enum.IntEnum):
    """Where a pass runs; a pass of an inner level is nested in its adaptors."""

    MODULE = 0
    CGSCC = 1
    FUNCTION = 2
    LOOPNEST = 3
    LOOPMSSA = 4  # a loop pass that needs MemorySSA: `loop-mssa(...)`
    LOOP = 5
    UNKNOWN = 6


_LEVEL_OF_SECTION = {
    "module": PassLevel.MODULE,
    "cgscc": PassLevel.CGSCC,
    "function": PassLevel.FUNCTION,
    "loopnest": PassLevel.LOOPNEST,
    "loop": PassLevel.LOOP,
}
# Each level's name in `mneme.core.pass_registry.ADAPTORS`, which says what adaptors surround it.
_CORE_LEVEL = {
    PassLevel.MODULE: "module",
    PassLevel.CGSCC: "cgscc",
    PassLevel.FUNCTION: "function",
    PassLevel.LOOPNEST: "loopnest",
    PassLevel.LOOP: "loop",
    PassLevel.LOOPMSSA: "loop-mssa",
}
_ADAPTOR_NAMES = ("module", "cgscc", "function", "loop", "loop-mssa", "loopnest", "devirt")


class PassOption:
    """One parameter of a pass: a toggle (`foo` / `no-foo`), a range (`name=N`) or a setting (one of several)."""

    class OptionType(enum.IntEnum):
        TOGGLE = 1
        RANGE = 2
        SETTING = 3

    def __init__(self, option: str | list[str], type: PassOption.OptionType, bound: int = 1):  # noqa: A002
        if isinstance(option, list):
            self.options = option
        else:
            self.option_name = option
        self._type = type
        self._bound = bound

    def is_toggle(self) -> bool:
        return self._type == PassOption.OptionType.TOGGLE

    def is_setting(self) -> bool:
        return self._type == PassOption.OptionType.SETTING

    def is_range(self) -> bool:
        return self._type == PassOption.OptionType.RANGE

    def get_upper_bound(self) -> int:
        return self._bound

    def draw(self, rng: Any = random) -> str:
        """One value of this option in LLVM's syntax."""
        if self.is_toggle():
            return self.option_name if rng.choice([True, False]) else "no-" + self.option_name
        if self.is_range():
            return f"{self.option_name}={rng.randint(1, self._bound)}"
        return rng.choice(self.options)


def parse_pass_options(entry: str) -> tuple[str, dict[str, PassOption] | None]:
    """`name<a;no-a;b=N;x;y>` as LLVM lists it -> (name, {option: PassOption}) (None: no parameters).

    `a`/`no-a` pairs become toggles, `b=N` ranges (bound 1, as the original draws them), the
    remaining words one setting; `=S` (a string such as a file name) is not drawn.
    """
    match = re.match(r"^([^<\s]+)((?:<[^>]*>)*)$", entry)
    if not match:
        raise ValueError(f"not a pass entry of LLVM's listing: {entry!r}")
    name, groups = match.groups()
    if not groups:
        return name, None
    options: dict[str, PassOption] = {}
    for group in re.findall(r"<([^>]*)>", groups):
        words = [w for w in group.split(";") if w and "lto" not in w]
        plain = [w for w in words if "=" not in w]
        for word in words:
            key, eq, value = word.partition("=")
            if eq and value == "N":
                options[key] = PassOption(key, PassOption.OptionType.RANGE, 1)
        bases = {w[3:] if w.startswith("no-") else w for w in plain}
        toggles = {b for b in bases if b in plain and "no-" + b in plain}
        for base in sorted(toggles):
            options[base] = PassOption(base, PassOption.OptionType.TOGGLE)
        rest = [w for w in plain if (w[3:] if w.startswith("no-") else w) not in toggles]
        if rest:
            options[name] = PassOption(rest, PassOption.OptionType.SETTING)
    return name, options or None


class AbstractPass:
    """A registered pass: its name, parameter schema, level and whether it is an analysis."""

    class ConcretePass:
        """A pass with chosen options; `str()` is its text in a pipeline (`gvn<no-pre>`)."""

        def __init__(self, apass: AbstractPass, options: list[str] | None = None, rng: Any = random):
            self._apass = apass
            if options is not None:
                self.options = list(options)
            elif apass.options is None:
                self.options = []
            else:  # no options given: draw one value of each
                self.options = [option.draw(rng) for option in apass.options.values()]

        @property
        def pass_name(self) -> str:
            return self._apass.pass_name

        def level(self) -> PassLevel:
            return self._apass.level

        def __str__(self) -> str:
            if not self.options:
                return self._apass.pass_name
            return f"{self._apass.pass_name}<{';'.join(self.options)}>"

        def __repr__(self) -> str:
            return f"ConcretePass({str(self)!r})"

        def __eq__(self, other: object) -> bool:
            return isinstance(other, AbstractPass.ConcretePass) and (str(self), self.level()) == (
                str(other),
                other.level(),
            )

        def __hash__(self) -> int:
            return hash((str(self), self.level()))

    def __init__(self, pass_name: str, options: dict[str, PassOption] | None, level: PassLevel, is_analysis: bool):
        self.pass_name = pass_name
        self.options = options
        self.level = PassLevel.LOOPMSSA if pass_name in NEEDS_MEMORY_SSA else level
        self.is_analysis = is_analysis

    def __str__(self) -> str:
        return self.pass_name

    def __repr__(self) -> str:
        return f"AbstractPass({self.pass_name!r}, level={self.level.name})"

    def optuna_pass(self, trial: Any, identifier: str) -> AbstractPass.ConcretePass:
        """A concrete pass whose options an Optuna trial chooses (parameter names `{identifier}_{option}`)."""
        chosen = []
        for key, option in (self.options or {}).items():
            if option.is_toggle():
                chosen.append(trial.suggest_categorical(f"{identifier}_{key}", [key, "no-" + key]))
            elif option.is_range():
                chosen.append(f"{key}={trial.suggest_int(f'{identifier}_{key}', 1, option.get_upper_bound())}")
            else:
                chosen.append(trial.suggest_categorical(f"{identifier}_{key}", list(option.options)))
        return AbstractPass.ConcretePass(self, chosen)


def excluded(name: str) -> bool:
    """True for a registered pass that is not worth tuning (see `EXCLUDED`)."""
    return name.startswith(EXCLUDED)


def split_top_level(text: str) -> list[str]:
    """Split a pipeline on the commas outside parentheses and angle brackets (empty parts left out)."""
    from mneme.core.ir import split_top_level as split

    return [p for p in split(text) if p]


def _adaptor(token: str) -> tuple[str, str] | None:
    """`function<eager-inv>(a,b)` -> ("function<eager-inv>", "a,b"); None for a plain pass."""
    match = re.match(r"^([A-Za-z0-9-]+(?:<[^>]*>)?)\((.*)\)$", token, re.S)
    if match and match.group(1).split("<")[0] in _ADAPTOR_NAMES:
        return match.group(1), match.group(2)
    return None


def flatten_passes(text: str) -> list[str]:
    """The passes of a pipeline without their adaptors, in order: `function(loop(licm,x)),gvn` -> licm, x, gvn."""
    out: list[str] = []
    for token in split_top_level(text):
        inner = _adaptor(token)
        out.extend(flatten_passes(inner[1]) if inner else [token])
    return out


def _registered() -> list[AbstractPass]:
    from mneme.core import pass_registry

    passes, seen = [], set()
    for name, params, level in pass_registry.transform_passes():
        if name in seen or excluded(name):
            continue  # a name registered at several levels runs at its outermost one
        seen.add(name)
        _, options = parse_pass_options(name + params)
        passes.append(AbstractPass(name, options, _LEVEL_OF_SECTION[level], False))
    return passes


class PipelineManager:
    """LLVM's passes as objects, and conversions between pass lists and pipeline text."""

    def __init__(self) -> None:
        self._passes = _registered()
        self._kw_passes = {p.pass_name: p for p in self._passes}
        self._kw_concrete_passes = {p.pass_name: AbstractPass.ConcretePass(p) for p in self._passes}

    def get_passes(self) -> list[str]:
        """The names of the passes worth tuning (LLVM's registered transform passes less `EXCLUDED`)."""
        return list(self._kw_passes)

    def get_concrete_passes(self) -> dict[str, AbstractPass.ConcretePass]:
        """Pass name -> a concrete pass of it (options drawn once, at construction)."""
        return self._kw_concrete_passes

    def get_pass(self, name: str) -> AbstractPass:
        """The registered pass of this name, tunable or not (`UsageError` when LLVM has none)."""
        found = self._kw_passes.get(name)
        if found is not None:
            return found
        for pass_name, params, level in _all_registered():
            if pass_name == name:
                return AbstractPass(name, parse_pass_options(name + params)[1], _LEVEL_OF_SECTION[level], False)
        raise UsageError(f"Unknown pass {name!r}: LLVM registers no such pass (`mneme ir passes --llvm` lists them)")

    def split_pipeline(self, pipeline: str) -> list[str]:
        """The passes of a pipeline text, adaptors removed (`function(gvn,loop-mssa(licm))` -> gvn, licm)."""
        return flatten_passes(pipeline)

    def generate(
        self, samples: int, mean_passes: float, std: float, allow_repeats: bool = True, seed: int = 0
    ) -> list[list[AbstractPass.ConcretePass]]:
        """`samples` random pipelines of the tunable passes, each of N(mean_passes, std) passes (at least 1).

        As the original, `seed` seeds Python's global random generator, so the same seed gives
        the same pipelines; without repeats a pipeline has at most one of each pass.
        """
        random.seed(seed)
        out = []
        for _ in range(samples):
            length = max(1, min(len(self._passes), int(round(random.gauss(mean_passes, std)))))
            if allow_repeats:
                chosen = [random.choice(self._passes) for _ in range(length)]
            else:
                chosen = random.sample(self._passes, length)
            out.append([AbstractPass.ConcretePass(p) for p in chosen])
        return out

    def from_string(self, str_pipeline: str) -> list[AbstractPass.ConcretePass]:
        """The concrete passes of a pipeline text (adaptors removed, options kept); unknown passes raise."""
        out = []
        for token in flatten_passes(str_pipeline):
            name, _, rest = token.partition("<")
            options = [o for o in rest[:-1].split(";") if o] if rest.endswith(">") else []
            out.append(AbstractPass.ConcretePass(self.get_pass(name), options))
        return out

    @staticmethod
    def to_string(passes: Sequence[AbstractPass.ConcretePass | str]) -> str:
        """A pipeline text running `passes` in order, each inside the adaptors of its level.

        Consecutive passes of one level share their adaptors:
        `[instcombine, licm, gvn]` -> `function<eager-inv>(instcombine,loop-mssa(licm),gvn)`.
        A plain string is a pass in LLVM's syntax (`gvn<no-pre>`), placed by its registered level.
        """
        from mneme.core import pass_registry

        items = []
        for item in passes:
            level = PassLevel(item.level() if hasattr(item, "level") else _level_of(str(item)))
            if level not in _CORE_LEVEL:
                raise UsageError(f"pass {item} has no known level ({level!r}); it cannot be placed in a pipeline")
            items.append((str(item), _CORE_LEVEL[level]))
        return pass_registry.nest(items)


def _level_of(text: str) -> PassLevel:
    name = text.split("<")[0].strip()
    if name in NEEDS_MEMORY_SSA:
        return PassLevel.LOOPMSSA
    for pass_name, _params, level in _all_registered():  # the outermost level a name is registered at
        if pass_name == name:
            return _LEVEL_OF_SECTION[level]
    raise UsageError(f"Unknown pass {name!r}: LLVM registers no such pass (`mneme ir passes --llvm` lists them)")


def _all_registered() -> list[tuple[str, str, str]]:
    from mneme.core import pass_registry

    return pass_registry.transform_passes()


__all__ = [
    "AbstractPass",
    "EXCLUDED",
    "PassLevel",
    "PassOption",
    "PipelineManager",
    "excluded",
    "flatten_passes",
    "parse_pass_options",
    "split_top_level",
]
