"""The roofline of docs/design.md §5: useful FLOPs and fewest bytes per op, the floor per row, the fraction reached.

Useful FLOPs count the matrix products only (LayerNorm, softmax, GELU and the residuals are a few
FLOPs per element, noise next to them): the four GEMMs make 24·B·N·d², and causal attention
2·B·N²·d, half of the full N×N square (4·B·N²·d) that the naive layer computes and masks.
The fewest bytes are what any implementation must move: the weights once, x read once and the
output written once.
"""
from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode, flop_registry, sdpa_flop_count

from ..core.device import DTYPES
from ..core.reference import ReferenceLayer
from ..core.shapes import Shape
from .ceilings import Ceilings

# GEMM name → (input width, output width) in units of d_model
GEMMS = {"qkv_proj": (1, 3), "out_proj": (1, 1), "fc1": (1, 4), "fc2": (4, 1)}


def _element_bytes(dtype: torch.dtype) -> int:
    return torch.finfo(dtype).bits // 8


def layer_min_bytes(shape: Shape, dtype: torch.dtype) -> int:
    """Weights and biases (12·d² + 13·d parameters) once, x read once, the output written once."""
    d = shape.d_model
    return _element_bytes(dtype) * (12 * d * d + 13 * d + 2 * shape.tokens * d)


def op_costs(shape: Shape, dtype: torch.dtype) -> pd.DataFrame:
    """Per op of the layer (index "op"): kind, useful FLOPs, FLOPs the naive layer spends, fewest bytes.

    An op's `min_bytes` is for that op alone (its weights and inputs read once, output written once);
    the last row, "layer", has the sums of the FLOPs and the layer's own fewest bytes, which are far
    fewer than the ops' sum because a fused layer never writes its intermediates.
    """
    B, N, d, T = shape.batch, shape.seq_len, shape.d_model, shape.tokens
    e = _element_bytes(dtype)
    rows = {}
    for name, (a, b) in GEMMS.items():
        flops = 2 * T * (a * d) * (b * d)
        rows[name] = ("GEMM", flops, flops, e * (a * d * b * d + b * d + T * a * d + T * b * d))
    full = 4 * B * N * N * d  # QKᵀ and PV over the whole (N, N) square, as the naive layer does
    rows["attention"] = ("attention", full // 2, full, e * 4 * T * d)  # read q, k, v; write y
    table = pd.DataFrame.from_dict(rows, orient="index", columns=["kind", "flops", "naive_flops", "min_bytes"])
    table.loc["layer"] = ["layer", table.flops.sum(), table.naive_flops.sum(), layer_min_bytes(shape, dtype)]
    table.index.name = "op"
    order = ["qkv_proj", "attention", "out_proj", "fc1", "fc2", "layer"]
    return table.reindex(order).astype({"flops": "int64", "naive_flops": "int64", "min_bytes": "int64"})


def layer_flops(shape: Shape) -> int:
    """Useful FLOPs of one forward call: 24·B·N·d² + 2·B·N²·d."""
    B, N, d = shape.batch, shape.seq_len, shape.d_model
    return 24 * B * N * d * d + 2 * B * N * N * d


def count_flops(module: torch.nn.Module, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None
                ) -> dict[str, int]:
    """FLOPs that `torch.utils.flop_counter.FlopCounterMode` counts per aten op for one call."""
    counter = FlopCounterMode(display=False)
    with counter:
        module(x, key_padding_mask)
    return {str(op): int(n) for op, n in counter.get_flop_counts()["Global"].items()}


def _tensor_bytes(values: object) -> int:
    return sum(t.numel() * t.element_size() for t in tree_flatten(values)[0] if isinstance(t, torch.Tensor))


RESHAPES = {"_unsafe_view"}  # ops whose schema returns a new tensor but that only reinterpret one
FUSED_ATTENTION = "_scaled_dot_product_"  # SDPA's backends: flash, efficient, cudnn, flash_attention_for_cpu, …


def _fused_attention_flops(query, key, value, *args, out_val=None, **kwargs) -> int:
    """QKᵀ and PV over the whole (L, S) square of q (B, H, L, hd), k (B, H, S, hd), v (B, H, S, hd_v):
    FlopCounterMode's rule for the backends it knows, here for all of them (it has none for the CPU's
    `_scaled_dot_product_flash_attention_for_cpu`, which would otherwise read as an op without FLOPs)."""
    return sdpa_flop_count(query.shape, key.shape, value.shape)


def _flop_rule(packet):
    """How FlopCounterMode counts an op's FLOPs (None: it does no matrix product), SDPA's forward backends
    all included."""
    name = packet.__name__
    fused = name.startswith(FUSED_ATTENTION) and "backward" not in name
    return flop_registry.get(packet) or (_fused_attention_flops if fused else None)


def _square_causal(func, args: tuple, kwargs: dict) -> bool:
    """Whether an op with an `is_causal` argument (SDPA's fused kernels) was called with it set on as many
    queries as keys: then it computes the lower half of the square. (With L ≠ S the share depends on how the
    kernel aligns the mask; FlopCounterMode's full count is kept there.)"""
    for i, arg in enumerate(func._schema.arguments):
        if arg.name == "is_causal":
            causal = kwargs["is_causal"] if "is_causal" in kwargs else args[i] if i < len(args) else arg.default_value
            q, k = args[0], args[1]  # (B, H, L, hd), (B, H, S, hd)
            return bool(causal) and q.shape[-2] == k.shape[-2]
    return False


class _Traffic(TorchDispatchMode):
    """Records every aten op of a call: FLOPs (FlopCounterMode's rules, matrix products only) and bytes read
    and written (its tensor inputs and outputs, once each). Views move nothing and are left out. A causal
    fused attention kernel over as many queries as keys gets half of the counter's full square: it skips the
    masked half (the useful count of the module docstring), where the naive layer's bmm does compute it."""

    def __init__(self):
        super().__init__()
        self.records: list[dict] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        returns = func._schema.returns
        viewing = returns and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)
        if viewing or func._overloadpacket.__name__ in RESHAPES:
            return out  # a view: no bytes move
        count = _flop_rule(func._overloadpacket)
        flops = int(count(*args, **kwargs, out_val=out)) if count else 0
        self.records.append({"op": f"aten::{func._overloadpacket.__name__}",
                             "flops": flops // 2 if _square_causal(func, args, kwargs) else flops,
                             "bytes": _tensor_bytes((args, kwargs)) + _tensor_bytes(out)})
        return out


def op_traffic(module: torch.nn.Module, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None
               ) -> pd.DataFrame:
    """Per aten op of one call of `module` (index "op"): calls, FLOPs and bytes read and written, summed over
    its calls. This is what each op moves as it runs, not the layer's fewest bytes: the naive layer's
    masked_fill reads and writes the whole score tensor, however few FLOPs it does."""
    mode = _Traffic()
    with torch.no_grad(), mode:
        module(x, key_padding_mask)
    frame = pd.DataFrame.from_records(mode.records, columns=["op", "flops", "bytes"])
    return frame.groupby("op", sort=False).agg(calls=("flops", "size"), flops=("flops", "sum"),
                                               bytes=("bytes", "sum"))


def flop_crosscheck(shape: Shape) -> pd.DataFrame:
    """Our FLOP formulas next to FlopCounterMode's count of the reference (run on the meta device: no compute).

    The GEMMs (aten.addmm/mm) must agree exactly. For attention (aten.bmm) the counter sees the naive
    layer's full (N, N) products, 4·B·N²·d: twice the useful causal count, since half the scores are
    computed only to be masked to -inf.
    """
    meta = torch.device("meta")
    with meta:
        layer = ReferenceLayer(shape.d_model, shape.n_heads)
    x = torch.empty(shape.batch, shape.seq_len, shape.d_model, device=meta)  # (B, N, C)
    counted = count_flops(layer, x)
    gemm = sum(n for op, n in counted.items() if op in ("aten.addmm", "aten.mm"))
    attention = sum(n for op, n in counted.items() if op in ("aten.bmm", "aten.baddbmm"))
    costs = op_costs(shape, torch.float32)
    useful = costs.groupby("kind").flops.sum()
    naive = costs.groupby("kind").naive_flops.sum()
    kinds = pd.Index(["GEMM", "attention"], name="kind")
    table = pd.DataFrame({"counted": [gemm, attention], "useful": useful[kinds].to_numpy(),
                          "naive": naive[kinds].to_numpy()}, index=kinds)
    return table.assign(counted_over_useful=table.counted / table.useful)


def roofline_table(shapes: Iterable[Shape], dtype: torch.dtype, ceilings: Ceilings) -> pd.DataFrame:
    """Per row: useful FLOPs, fewest bytes, intensity, the compute and memory times, the floor and its bound."""
    records = []
    for shape in shapes:
        flops, min_bytes = layer_flops(shape), layer_min_bytes(shape, dtype)
        compute_ms = flops / (ceilings.matmul_tflops * 1e12) * 1e3
        memory_ms = min_bytes / (ceilings.copy_gbps * 1e9) * 1e3
        records.append({"row": shape.row, "shape": shape.label, "flops": flops, "min_bytes": min_bytes,
                        "intensity": flops / min_bytes, "compute_ms": compute_ms, "memory_ms": memory_ms,
                        "floor_ms": max(compute_ms, memory_ms),
                        "bound": "compute" if compute_ms >= memory_ms else "memory"})
    return pd.DataFrame.from_records(records)


ROOFLINE_RESULT_COLUMNS = ("achieved_tflops", "fraction_of_floor", "ceiling_tflops", "ceiling_gbps", "ceiling_source")


def add_roofline(results: pd.DataFrame, ceilings: Ceilings) -> pd.DataFrame:
    """Sweep results with the roofline columns: flops, min_bytes, intensity, floor_ms, bound,
    achieved_tflops (useful FLOPs / median time), fraction_of_floor (floor_ms / median_ms) and the ceilings."""
    if results.empty:
        return results
    dtypes = set(results["dtype"])
    if len(dtypes) != 1 or next(iter(dtypes)) not in DTYPES:
        raise ValueError(f"results must have one known dtype, got {sorted(map(str, dtypes))}")
    shapes = {r.row: Shape(r.row, int(r.batch), int(r.seq_len), int(r.d_model), int(r.n_heads))
              for r in results.drop_duplicates("row").itertuples()}
    table = roofline_table(shapes.values(), DTYPES[next(iter(dtypes))], ceilings).drop(columns="shape")
    added = [*table.columns.drop("row"), *ROOFLINE_RESULT_COLUMNS]
    out = results.drop(columns=added, errors="ignore").merge(table, on="row", how="left")  # replaced if present
    return out.assign(achieved_tflops=out.flops / (out.median_ms * 1e-3) / 1e12,
                      fraction_of_floor=out.floor_ms / out.median_ms,
                      ceiling_tflops=ceilings.matmul_tflops, ceiling_gbps=ceilings.copy_gbps,
                      ceiling_source=ceilings.source)


def fraction_table(results: pd.DataFrame) -> pd.DataFrame:
    """Row × variant: the floor in ms and each variant's fraction of it (floor_ms / median_ms), as a wide table."""
    wide = results.pivot(index="row", columns="variant", values="fraction_of_floor")
    wide = wide.reindex(index=list(dict.fromkeys(results.row)), columns=list(dict.fromkeys(results.variant)))
    floors = results.drop_duplicates("row").set_index("row")[["shape", "floor_ms", "bound"]]
    return floors.join(wide).reset_index()
