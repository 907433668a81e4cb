"""The coverage table of docs/original-api.md is true: every item marked same or differs exists at its path."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from mneme.futures import EvalFuture
from mneme.mneme_types import ExperimentConfiguration, ExperimentResult, dim3
from mneme.recorded_execution import RecordedExecution
from mneme.replay_executor import BaseExecutor
from mneme.tuning import search_space as ss

DOC = Path(__file__).resolve().parents[2] / "docs" / "original-api.md"


def _rows() -> list[tuple[str, str, str]]:
    text = DOC.read_text()
    coverage = text[text.index("## Coverage of the original's API reference") :]
    coverage = coverage[: coverage.index("\n## ", 1)]
    rows, module = [], None
    for line in coverage.splitlines():
        heading = re.match(r"### `([\w.]+)`", line)
        if heading:
            module = heading.group(1)
        item = re.match(r"\| `([\w.]+)` \| (same|differs|missing)", line)
        if item:
            rows.append((module, item.group(1), item.group(2)))
    return rows


def test_the_counts_in_the_text_match_the_table():
    rows = _rows()
    counts = {s: sum(1 for *_, status in rows if status == s) for s in ("same", "differs", "missing")}
    summary = f"**{len(rows)} items: {counts['same']} same, {counts['differs']} differ by design, {counts['missing']} missing.**"
    assert summary in DOC.read_text()


@pytest.fixture(scope="module")
def instances(saxpy_db):
    rec = RecordedExecution.from_json(str(saxpy_db))
    (key,) = rec.keys()
    return {
        "RecordedExecution": rec,
        "KernelInstance": rec[key],
        "MemStateRef": rec[key].prologue,
        "BaseExecutor": BaseExecutor(str(saxpy_db), key),
        "ExperimentConfiguration": ExperimentConfiguration(),
        "ExperimentResult": ExperimentResult(),
        "dim3": dim3(),
        "BaseParam": ss.FixedParam("f", 1),
        "FixedParam": ss.FixedParam("f", 1),
        "BoolParam": ss.BoolParam("b"),
        "CategoricalParam": ss.CategoricalParam("c", [1, 2]),
        "IntRangeParam": ss.IntRangeParam("i", 1, 10, 4),
        "RealRangeParam": ss.RealRangeParam("r", 0.0, 1.0),
        "PipelineParam": ss.PipelineParam("p", 2),
        "EvalFuture": EvalFuture(0, ExperimentConfiguration()),
    }


def test_every_item_marked_same_or_differs_exists(instances):
    absent = []
    for module, item, status in _rows():
        if status == "missing":
            continue
        owner, *members = item.split(".")
        obj = getattr(importlib.import_module(module), owner, None)
        if obj is None:
            absent.append(f"{module}.{item}")
            continue
        for member in members:
            if hasattr(obj, member):
                obj = getattr(obj, member)
            elif owner in instances and hasattr(instances[owner], member):  # set by the constructor
                obj = getattr(instances[owner], member)
            else:
                absent.append(f"{module}.{item}")
                break
    assert absent == []
