"""LLVM's stable pass names that a configuration's `passes` may list, with what each does.

Apart from `mneme.core.pipeline` so that listing them (`mneme ir passes`) loads no LLVM: each
entry adds its pass to an llvmlite module pass manager handed in by the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _pass(method: str, doc: str) -> tuple[Callable[[Any], None], str]:
    return (lambda pm: getattr(pm, method)()), doc


# Stable names (LLVM's own pass names) -> how to add the pass to llvmlite's module pass manager.
PASSES: dict[str, tuple[Callable[[Any], None], str]] = {
    "adce": _pass("add_aggressive_dce_pass", "aggressive dead code elimination"),
    "aggressive-instcombine": _pass("add_aggressive_instcombine_pass", "aggressive instruction combining"),
    "always-inline": _pass("add_always_inliner_pass", "inline always_inline functions"),
    "argpromotion": _pass("add_argument_promotion_pass", "promote by-reference arguments to scalars"),
    "break-crit-edges": _pass("add_break_critical_edges_pass", "split critical edges"),
    "constmerge": _pass("add_constant_merge_pass", "merge duplicate global constants"),
    "deadargelim": _pass("add_dead_arg_elimination_pass", "remove dead arguments"),
    "dce": _pass("add_dead_code_elimination_pass", "dead code elimination"),
    "dse": _pass("add_dead_store_elimination_pass", "dead store elimination"),
    "globaldce": _pass("add_global_dead_code_eliminate_pass", "drop unreferenced internal globals and functions"),
    "globalopt": _pass("add_global_opt_pass", "optimize global variables"),
    "instcombine": _pass("add_instruction_combine_pass", "combine instructions"),
    "ipsccp": _pass("add_ipsccp_pass", "interprocedural sparse conditional constant propagation"),
    "jump-threading": _pass("add_jump_threading_pass", "thread jumps over known conditions"),
    "lcssa": _pass("add_lcssa_pass", "loop-closed SSA form"),
    "loop-deletion": _pass("add_loop_deletion_pass", "delete dead loops"),
    "loop-reduce": _pass("add_loop_strength_reduce_pass", "loop strength reduction"),
    "loop-rotate": _pass("add_loop_rotate_pass", "rotate loops"),
    "loop-simplify": _pass("add_loop_simplify_pass", "canonicalize loops"),
    "loop-unroll": _pass("add_loop_unroll_pass", "unroll loops"),
    "loop-unroll-and-jam": _pass("add_loop_unroll_and_jam_pass", "unroll and jam loop nests"),
    "lower-atomic": _pass("add_lower_atomic_pass", "lower atomics to plain memory operations"),
    "lower-switch": _pass("add_lower_switch_pass", "lower switch to branches"),
    "mem2reg": _pass("add_register_to_memory_pass", "promote allocas to registers"),
    "memcpyopt": _pass("add_mem_copy_opt_pass", "optimize memcpy/memset"),
    "mergefunc": _pass("add_merge_functions_pass", "merge identical functions"),
    "newgvn": _pass("add_new_gvn_pass", "global value numbering"),
    "partial-inliner": _pass("add_partial_inliner_pass", "partial inlining"),
    "reassociate": _pass("add_reassociate_pass", "reassociate expressions"),
    "rpo-function-attrs": _pass("add_rpo_function_attrs_pass", "infer function attributes (top-down)"),
    "function-attrs": _pass("add_post_order_function_attributes_pass", "infer function attributes (bottom-up)"),
    "sccp": _pass("add_sccp_pass", "sparse conditional constant propagation"),
    "simplifycfg": _pass("add_simplify_cfg_pass", "simplify the control-flow graph"),
    "sink": _pass("add_sinking_pass", "sink instructions into successors"),
    "sroa": _pass("add_sroa_pass", "scalar replacement of aggregates"),
    "strip-dead-prototypes": _pass("add_strip_dead_prototype_pass", "drop unused declarations"),
    "tailcallelim": _pass("add_tail_call_elimination_pass", "tail call elimination"),
    "verify": _pass("add_verifier", "verify the IR"),
}
