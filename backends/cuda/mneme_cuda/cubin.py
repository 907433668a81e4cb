"""Resource usage read from a cubin itself: its ELF sections and `.nv.info` attribute records.

The assemblers' text reports differ (nvJitLink's log drops lines ptxas prints, CUDA 13 prints no
`cmem` line on sm_90), so the numbers come from the binary the device loads, the same whichever
assembler built it. What each field is (docs/design/cubin-resources.md):

* registers: the kernel's EIATTR_REGCOUNT record in the module-wide `.nv.info` section;
* local memory: its EIATTR_FRAME_SIZE record (ptxas' "stack frame"), or a `.nv.local.<k>` section;
* shared memory: the size of `.nv.shared.<k>` less the block's reserved system shared memory
  (sm_90 and later put it at the start of that section: `.nv.reservedSmem.*` symbols);
* constant memory: the user constant bank, `.nv.constant3` (module) and `.nv.constant3.<k>` (kernel),
  what the driver reports; bank 0 holds the launch parameters, and standalone ptxas puts the addresses
  of the globals a kernel uses in a bank of its own (`.nv.constant4`) that nvJitLink's cubin lacks;
* max threads per block: EIATTR_MAX_THREADS (`__launch_bounds__`, `.maxntid`), else -1;
* the assembler and its version: the `.note.nv.tkinfo` note ("ptxas" or "nvJIT API", "release X.Y").

Spills have no attribute record; they come from the assembler's log (`spills_from_report`).
An `.nv.info` record is four bytes, `format, attribute, u16`; for format EIFMT_SVAL the u16 is the
length of the payload that follows, otherwise it is the value.
"""

from __future__ import annotations

import re
import struct

import attrs

from mneme.core.backend import Resources
from mneme.core.errors import IRError

# .nv.info record formats and the attributes read here
EIFMT_SVAL = 0x04
EIATTR_MAX_THREADS = 0x05
EIATTR_FRAME_SIZE = 0x11
EIATTR_REGCOUNT = 0x2F

# the block's reserved system shared memory when the cubin names the reservation but not its size
_RESERVED_SMEM_DEFAULT = 1024
_SHT_SYMTAB = 2
_SHT_NOTE = 7


@attrs.frozen
class _Section:
    name: str
    type: int
    offset: int
    size: int
    link: int


class Cubin:
    """A parsed cubin (64-bit little-endian ELF): its sections, symbols and `.nv.info` records."""

    def __init__(self, data: bytes, label: str = "cubin"):
        self.data = bytes(data)
        self.label = label
        try:
            self._parse()
        except (struct.error, ValueError, IndexError) as exc:
            raise IRError(f"{label}: not a readable cubin ({exc}); was it produced by ptxas or nvJitLink?") from exc

    def _parse(self) -> None:
        d = self.data
        if d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
            raise ValueError("not a 64-bit little-endian ELF file")
        shoff = struct.unpack_from("<Q", d, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
        raw = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
        names = raw[shstrndx]
        self.sections = [
            _Section(self._string(names[4], name), typ, off, size, link)
            for name, typ, _flags, _addr, off, size, link, _info, _align, _ent in raw
        ]
        self.symbols: dict[str, tuple[int, int, int]] = {}  # name -> (section index, value, size)
        self.symbol_names: list[str] = []
        for sec in self.sections:
            if sec.type != _SHT_SYMTAB:
                continue
            strtab = self.sections[sec.link]
            for k in range(sec.size // 24):
                name, _info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", d, sec.offset + k * 24)
                text = self._string(strtab.offset, name)
                self.symbol_names.append(text)
                if text:
                    self.symbols.setdefault(text, (shndx, value, size))

    def _string(self, table_offset: int, index: int) -> str:
        start = table_offset + index
        return self.data[start : self.data.index(b"\0", start)].decode("utf-8", "replace")

    def section(self, name: str) -> _Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def records(self, section: _Section) -> list[tuple[int, int, bytes | int]]:
        """(format, attribute, payload bytes or u16 value) of each record of an `.nv.info` section."""
        out, pos, end = [], section.offset, section.offset + section.size
        while pos + 4 <= end:
            fmt, attr, value = struct.unpack_from("<BBH", self.data, pos)
            pos += 4
            if fmt == EIFMT_SVAL:
                out.append((fmt, attr, self.data[pos : pos + value]))
                pos += value
            else:
                out.append((fmt, attr, value))
        return out

    def kernels(self) -> list[str]:
        """Names of the kernels (the functions with an `.nv.info.<name>` section)."""
        return [s.name[len(".nv.info.") :] for s in self.sections if s.name.startswith(".nv.info.")]

    def toolkit(self) -> tuple[str, str]:
        """(assembler, version) from the `.note.nv.tkinfo` note: ("ptxas"|"nvjitlink", "13.0.88"), else ("", "")."""
        note = self.section(".note.nv.tkinfo")
        if note is None:
            return "", ""
        text = self.data[note.offset : note.offset + note.size]
        version = re.search(rb"release [\d.]+, V([\d.]+)", text)
        tool = "nvjitlink" if b"nvJIT API" in text else ("ptxas" if b"ptxas" in text else "")
        return tool, version.group(1).decode() if version else ""

    def resources(self, kernel: str) -> Resources:
        """The resources of `kernel` (spills: -1, see `spills_from_report`)."""
        if self.section(f".nv.info.{kernel}") is None:
            known = ", ".join(self.kernels()) or "none"
            raise IRError(f"{self.label}: no kernel {kernel!r} in the cubin (kernels: {known})")
        index = self.symbol_names.index(kernel) if kernel in self.symbol_names else -1
        registers, frame = -1, 0
        info = self.section(".nv.info")
        for fmt, attr, payload in self.records(info) if info is not None else []:
            if fmt == EIFMT_SVAL and attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and len(payload) == 8:
                symbol, value = struct.unpack("<II", payload)
                if symbol == index:
                    if attr == EIATTR_REGCOUNT:
                        registers = value
                    else:
                        frame = value
        max_threads = -1
        for fmt, attr, payload in self.records(self.section(f".nv.info.{kernel}")):
            if fmt == EIFMT_SVAL and attr == EIATTR_MAX_THREADS and len(payload) == 12:
                x, y, z = struct.unpack("<III", payload)
                max_threads = x * y * z
        local = self.section(f".nv.local.{kernel}")
        shared = self.section(f".nv.shared.{kernel}")
        return Resources(
            registers=registers,
            local_mem=max(frame, local.size if local else 0),
            const_mem=self._user_constant(kernel),
            shared_mem=max(0, shared.size - self._reserved_shared()) if shared else 0,
            max_threads_per_block=max_threads,
        )

    def _user_constant(self, kernel: str) -> int:
        total = 0
        for sec in self.sections:
            match = _CONSTANT_BANK.fullmatch(sec.name)
            if match and match.group(1) == USER_CONSTANT_BANK and match.group(2) in (None, kernel):
                total += sec.size
        return total

    def _reserved_shared(self) -> int:
        cap = self.symbols.get(".nv.reservedSmem.cap")
        if cap is not None:
            return cap[1]
        # ptxas names the reservation (its offset symbol) but not its size: sm_90's 1 KiB
        return _RESERVED_SMEM_DEFAULT if ".nv.reservedSmem.offset0" in self.symbols else 0


def spills_from_report(report: str, kernel: str) -> tuple[int, int]:
    """(spill stores, spill loads) bytes of `kernel` from an assembler's verbose log; (-1, -1) if absent."""
    header = "Function properties for " + kernel  # a line ending so; no pattern built per kernel (it costs more)
    end = 0
    for line in report.splitlines(keepends=True):
        end += len(line)
        if line.rstrip().endswith(header):
            found = _SPILLS.search(report, end)
            return (int(found.group(1)), int(found.group(2))) if found else (-1, -1)
    return -1, -1


USER_CONSTANT_BANK = "3"  # `__constant__` variables, sm_50 and later (`ptxas -v`: "N bytes cmem[3]")
_CONSTANT_BANK = re.compile(r"\.nv\.constant(\d+)(?:\.(.+))?")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def resources(cubin: bytes, kernel: str, report: str = "", assembler: str = "") -> Resources:
    """The resources of `kernel` in `cubin`, spills from the assembler's `report`, tagged with the assembler.

    `assembler` ("ptxas"/"nvjitlink") is used where the cubin names none; the version is the cubin's.
    """
    parsed = Cubin(cubin)
    found = parsed.resources(kernel)
    stores, loads = spills_from_report(report, kernel)
    tool, version = parsed.toolkit()
    tool = tool or assembler
    return attrs.evolve(found, spill_stores=stores, spill_loads=loads, assembler=f"{tool} {version}".strip())
