"""`mneme.pipeline` of the original Mneme API: the optimization passes a pipeline may draw from."""

from __future__ import annotations

from collections.abc import Sequence


class PipelineManager:
    """The pass names the IR toolkit offers and how a list of them becomes a pipeline string."""

    def get_passes(self) -> list[str]:
        from mneme.core.tuning.params import available_passes

        return list(available_passes())

    def get_concrete_passes(self) -> dict[str, str]:
        """Pass name -> its text in a pipeline (the name itself: LLVM wraps function passes)."""
        return {name: name for name in self.get_passes()}

    def to_string(self, passes: Sequence[str]) -> str:
        """A textual pipeline (`instcombine,gvn`); empty runs no optimization."""
        return ",".join(passes)
