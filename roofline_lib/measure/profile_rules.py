"""Which category an op's or a kernel's time belongs to: the one rule that sorts profiled time into `CATEGORIES`.

In this layer 4-D matmul/bmm only ever computes attention's QKᵀ and PV, and ones/arange/comparisons/boolean
ops only ever build masks, so an aten op's name says its category; a kernel that no categorized op launched
is sorted by fragments of its name.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

CATEGORIES = ("GEMM", "attention core", "softmax", "mask construction", "masking", "LayerNorm",
              "activation", "elementwise/residual", "copy/layout", "other", "whole-layer kernel")
MASK_CATEGORIES = ("mask construction", "masking")

# aten op → category. In this layer 4-D matmul/bmm only ever computes attention's QKᵀ and PV,
# and ones/arange/comparisons/boolean ops only ever build masks.
_OPS = {
    "GEMM": "linear addmm mm",
    "attention core": "matmul bmm baddbmm scaled_dot_product_attention _scaled_dot_product_attention_math "
                      "_scaled_dot_product_flash_attention _scaled_dot_product_flash_attention_for_cpu "
                      "_scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention "
                      "_flash_attention_forward _efficient_attention_forward _cudnn_attention_forward",
    "softmax": "softmax _softmax",
    "mask construction": "ones tril triu arange ge gt le lt eq bitwise_not bitwise_and __and__ __invert__ "
                         "logical_not logical_and",
    "masking": "masked_fill masked_fill_ where",
    "LayerNorm": "layer_norm native_layer_norm",
    "activation": "gelu relu silu tanh",
    "elementwise/residual": "add add_ sub mul mul_ div div_",
    "copy/layout": "copy_ clone contiguous reshape view _unsafe_view transpose permute t expand unsqueeze select "
                   "slice unbind split cat stack as_strided to _to_copy empty empty_like empty_strided fill_ zero_",
}
_OP_CATEGORY = {f"aten::{op}": category for category, ops in _OPS.items() for op in ops.split()}
# kernel-name fragments, first match wins: only for kernels that no categorized aten op launched
_KERNEL_NAME_CATEGORY = [
    ("whole-layer kernel", r"^_(decode_)?layer_kernel$"),  # kernels.whole_layer, decode_layer: all in one launch
    ("masking", r"masked_fill|where"),
    ("mask construction", r"tril|triu|arange"),
    ("attention core", r"flash|fmha|attention|attn|sdpa"),
    ("GEMM", r"gemm|gemv|nvjet|cutlass|xmma|cublas|matmul|fused_linear"),  # fused_linear, gemv: LN, GEMM, epilogue
    ("softmax", r"softmax"),
    ("LayerNorm", r"layer_?norm"),
    ("activation", r"gelu|relu|silu"),
    ("copy/layout", r"copy|memcpy|memset|cat|transpose|fill"),
    ("elementwise/residual", r"elementwise|add|mul|div"),
]


KERNEL_NAME_NOISE = re.compile(r"^void |\(anonymous namespace\)::|\b(?:at::native::|at::|c10::|std::)")
KERNEL_NAME_CHARS = 90  # a table column a learner can read beside its numbers


def short_kernel_name(name: str) -> str:
    """A kernel's name for a table: without `void`, the common namespaces and the argument list, and at most
    KERNEL_NAME_CHARS long, its middle replaced by "…" (the kernel's name at the start, the template arguments
    that tell two instances apart at the end; the Chrome trace keeps the whole name)."""
    short, depth = KERNEL_NAME_NOISE.sub("", name), 0
    for i, ch in enumerate(short):  # the argument list: the first "(" outside the template arguments
        depth = max(0, depth + (ch == "<") - (ch == ">"))
        if ch == "(" and depth == 0 and i > 0:
            short = short[:i].strip()
            break
    if len(short) <= KERNEL_NAME_CHARS:
        return short
    head = 2 * KERNEL_NAME_CHARS // 3
    return short[:head] + "…" + short[-(KERNEL_NAME_CHARS - head - 1):]


def categorize(name: str) -> str:
    """The category of one aten op ("aten::…") or, by name fragments, of one kernel."""
    if name.startswith("aten::"):
        return _OP_CATEGORY.get(name, "other")
    return next((category for category, pattern in _KERNEL_NAME_CATEGORY if re.search(pattern, name, re.IGNORECASE)),
                "other")


def charge_category(chain: Sequence[str], kernel: str | None = None) -> str:
    """The category that an op's time (or that of a `kernel` it launched) is charged to.

    `chain` is the op's call chain, innermost first, up to the op the layer called. A mask op anywhere
    in it wins (the copy inside `masked_fill` is masking; SDPA's conversion of a boolean mask into an
    additive one is too); otherwise the op the layer called decides (the layout copies inside
    `matmul` belong to attention); what no categorized aten op claims is sorted by the kernel's name.
    """
    ops = [categorize(op) for op in chain if op.startswith("aten::")]
    mask = [c for c in ops if c in MASK_CATEGORIES]
    if mask:
        return mask[0]
    if ops and (ops[-1] != "other" or kernel is None):
        return ops[-1]
    return categorize(kernel) if kernel else "other"

