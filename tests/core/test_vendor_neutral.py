"""The core names no vendor toolchain or binding and no sampler library (issue 26, "Done when").

Every file under mneme/core (Python, C/C++ headers and sources, anything else) is read line by
line. The words are matched case-insensitively as substrings (they occur in no English word,
and a substring also finds `mneme_cuda`, `ptxas_opt`, `cudaMalloc`); only "hip" needs
boundaries: no letter before it and no small letter after it, "hip" or "HIP" (so `ownership`
passes and `mneme_hip`, `hipcc` or `hipModuleLoad` do not). Optuna, the default result store's
and sampler plugin's library, is named nowhere in the core (issue 37: samplers and the store are
plugins; the import contract `core-imports-no-optimizer-library` has no exception). Why:
docs/design/interfaces.md, "Layers and import contracts".
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "mneme" / "core"

VENDOR = re.compile(
    r"cuda|nvjitlink|ptxas|ld\.lld|nvptx|amdgpu|hipcc|(?-i:(?<![A-Za-z])(?:hip|HIP)(?![a-z]))", re.IGNORECASE
)
SAMPLER_LIBRARY = re.compile(r"nevergrad|cmaes", re.IGNORECASE)
# Optuna's search algorithms: sampler plugins offer them, the core never runs one.
OPTUNA_ALGORITHM = re.compile(r"(TPE|CmaEs|GP|QMC|NSGAII|NSGAIII|BoTorch|BruteForce|Grid)Sampler")
OPTUNA = re.compile(r"optuna", re.IGNORECASE)

# Exact exceptions, (file, text on the line, why). Each must still match a line, so none outlives its reason.
OPTUNA_LINES: list[tuple[str, str, str]] = []  # the sampler interface names none: samplers adapt in their plugins
# Native sources of the recorder engine that another change owns (the device-operations interface);
# listed here until it rewords them, each must still match (then delete the entry).
PENDING: list[tuple[str, str, str]] = []


def _files() -> list[Path]:
    return sorted(p for p in CORE.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def _lines():
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            yield rel, number, line


def _optimizer_contract() -> configparser.SectionProxy:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return config["importlinter:contract:core-imports-no-optimizer-library"]


def _excepted(rel: str, line: str, table) -> bool:
    return any(rel == path and text in line for path, text, _ in table)


def test_the_core_names_no_vendor_toolchain_or_binding():
    found = [
        f"{rel}:{n}: {line.strip()}"
        for rel, n, line in _lines()
        if VENDOR.search(line) and not _excepted(rel, line, PENDING)
    ]
    assert not found, "vendor words in mneme/core (a backend declares them; docs/design/interfaces.md):\n" + "\n".join(
        found
    )


def test_the_core_names_no_sampler_library_and_runs_no_search_algorithm():
    found = [
        f"{rel}:{n}: {line.strip()}"
        for rel, n, line in _lines()
        if SAMPLER_LIBRARY.search(line) or OPTUNA_ALGORITHM.search(line)
    ]
    assert not found, "sampler libraries or algorithms in mneme/core (they live in sampler plugins):\n" + "\n".join(
        found
    )


def test_optuna_is_named_nowhere_in_the_core_and_its_import_contract_has_no_exception():
    contract = _optimizer_contract()
    assert contract["forbidden_modules"].split() == ["optuna", "nevergrad", "cmaes"]
    assert "ignore_imports" not in contract
    found = [
        f"{rel}:{n}: {line.strip()}"
        for rel, n, line in _lines()
        if OPTUNA.search(line) and not _excepted(rel, line, OPTUNA_LINES)
    ]
    assert not found, (
        "Optuna in the core (its samplers, store and plots live in the optuna plugin, "
        "mneme/plugins/samplers/optuna_*.py):\n" + "\n".join(found)
    )


def test_every_exception_still_matches_a_line():
    lines = list(_lines())
    for path, text, why in OPTUNA_LINES + PENDING:
        assert any(rel == path and text in line for rel, _, line in lines), f"stale exception {path}: {text!r} ({why})"
    for path, text, _ in PENDING:
        assert any(rel == path and text in line and VENDOR.search(line) for rel, _, line in lines), path


def test_the_patterns_find_what_they_are_for():
    # The scan must be able to fail: each pattern on a line it exists to catch, and not on English.
    assert all(
        VENDOR.search(s)
        for s in (
            "import mneme_cuda",
            "cudaMalloc",
            "ptxas_opt",
            "ld.lld-19",
            "mneme_hip",
            "hipModuleLoad",
            "HIP events",
            "nvPTX64",
            "AMDGPU code",
        )
    )
    assert not any(VENDOR.search(s) for s in ("ownership", "relationship", "chip", "hipster"))
    assert SAMPLER_LIBRARY.search("import nevergrad as ng") and SAMPLER_LIBRARY.search("cmaes' warnings")
    assert OPTUNA_ALGORITHM.search("optuna.samplers.TPESampler(seed=1)")
    assert not OPTUNA_ALGORITHM.search("optuna.samplers.BaseSampler")
