"""Write the seed corpus under tests/fuzz/corpus/<target>/: small valid inputs and known hostile ones.

Run once when a format changes: python tests/fuzz/make_corpus.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from fuzz_targets import CORPUS, seed_snapshot  # noqa: E402
from snapshot_corpus import corpus, write_snapshot  # noqa: E402


def main() -> None:
    def put(target: str, name: str, data: bytes | str) -> None:
        folder = CORPUS / target
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data.encode() if isinstance(data, str) else data)

    with tempfile.TemporaryDirectory() as tmp:
        put("snapshot", "seed.mneme", seed_snapshot(Path(tmp)))
        for name, body, raw, _valid in corpus():
            if name == "rle-bomb-2GiB":
                continue  # 64 KiB; the unit tests cover it
            path = Path(tmp) / f"{name}.mneme"
            write_snapshot(path, body, raw)
            put("snapshot", f"{name}.mneme", path.read_bytes())
    db = {
        "SchemaVersion": 3,
        "KernelName": "k",
        "StaticHash": "s",
        "Backend": "host",
        "Arch": "x86_64",
        "Modules": ["k.ll"],
        "ArgNames": ["n"],
        "ArgSizes": [4],
        "ArgOffsets": [0],
        "ArgKinds": ["int"],
        "Specializations": [True],
        "instances": {
            "d": {
                "GridDims": {"x": 1, "y": 1, "z": 1},
                "BlockDims": {"x": 32, "y": 1, "z": 1},
                "SharedMem": 0,
                "Args": "40000000",
                "Prologue": "k.ll",
                "Epilogue": "k.ll",
                "Occurrences": 1,
                "AppTimes": [1e-5],
            }
        },
    }
    put("database", "valid.json", json.dumps(db, indent=1))
    put("database", "self-reference.json", json.dumps(dict(db, Modules=["s.json"])))
    put("database", "nested.json", "[" * 5000 + "]" * 5000)
    put("database", "digits.json", '{"SchemaVersion": ' + "7" * 5000 + "}")
    put(
        "capture",
        "saxpy.yaml",
        "ir: k.ll\nkernel: saxpy\ngrid: 4\nblock: 128\nargs:\n  - 512\n  - 2.0\n"
        "  - {random: {dtype: float32, shape: [512], seed: 1}}\n  - {arange: {dtype: float32, stop: 512}}\n",
    )
    put(
        "capture",
        "hostile.yaml",
        "args:\n  - {scalar: 99999999999999999999999, dtype: int64}\n"
        "  - {file: {path: /dev/zero}}\n  - {zeros: {dtype: object, shape: [4]}}\n",
    )
    put("capture", "alias.yaml", "a: &a [1, 1, 1]\nb: [*a, *a, *a]\nargs: []\n")
    put(
        "capture",
        "outside.yaml",
        "args:\n  - {file: {path: ../../etc/hostname, dtype: uint8}}\n"
        "  - {file: {path: /etc/hostname, dtype: uint8}}\n",
    )
    put("capture", "numbers.yaml", "args:\n  - {zeros: {shape: [4], shape: [8]}}\n  - .nan\n  - 1e400\n")
    put("capture", "nodes.yaml", "args:\n  - {literal: {dtype: int8, values: [" + ", ".join(["1"] * 250) + "]}}\n")
    saxpy = (HERE.parent.parent / "examples" / "saxpy" / "saxpy.ll").read_text()
    put("ir", "saxpy.ll", saxpy)
    from mneme.core import ir

    put("ir", "saxpy.bc", bytes(ir.load(saxpy).as_bitcode()))
    put("ir", "reader-asserts.bc", (HERE.parent / "data" / "corrupt" / "saxpy-reader-asserts.bc").read_bytes())
    put(
        "ir", "undecodable-message.bc", (HERE.parent / "data" / "corrupt" / "saxpy-undecodable-message.bc").read_bytes()
    )
    put(
        "space",
        "space.yaml",
        "name: s\nparameters:\n  block_x: {powers_of_two: [32, 1024]}\n"
        "  specialize: bool\n  codegen_opt: {choices: [2, 3]}\nconstraints:\n  - block_x % 64 == 0 or not specialize\n",
    )
    put(
        "space",
        "hostile.yaml",
        "parameters:\n  block_x: {low: 0, high: .inf}\nconstraints:\n"
        "  - \"min.__self__.__import__('os').system('true')\"\n",
    )
    put("space", "base-code.yaml", "base: helper.py:X\nparameters:\n  block_x: {choices: [64, 128]}\n")
    put("space", "base-loop.yaml", "base: space.yaml\nconstraints:\n  - \"codegen_method + codegen_method == ''\"\n")
    for i, text in enumerate(
        [
            "block_x % 32 == 0 and block_x <= 512",
            "min(a, b) * 2 >= -14 or not x",
            "abs(b) if a > 1 else 0",
            "9 ** 9 ** 9",
            "().__class__",
            "a < b < x",
            "s + s + s + s + s == s",
            "'%099999999d' % a == s",
        ]
    ):
        put("constraint", f"c{i}.txt", text)


if __name__ == "__main__":
    main()
