"""Decode on a GPU: §3 for every decoder (fp16 and bf16, left padding), µs per layer per step against the step's
floor, the `torch.compile(mode="reduce-overhead")` peer interleaved, and tokens per second of model-sized stacks.

    python -m benchmarks.decode --out OUT             # on a GPU: checks, the four target rows, the stack grid
    python -m benchmarks.decode --out "$(mktemp -d)" --smoke   # the same code paths on tiny shapes (a CPU too)

Writes `decode_checks_*.csv`, `decode_rows_*.csv` and `decode_stacks_*.csv` (GPU, versions, dtype, date) and
prints a table of each; the rows' and the stacks' CSVs are written again after every row or stack, so a run cut
short keeps what it measured. The floor is the step's fewest bytes over the copy bandwidth measured in the same run
(`roofline_lib.measure.decode_roofline`).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import pandas as pd
import torch

from roofline_lib.core.catalog import STATIC_DECODERS
from roofline_lib.core.device import environment, free_memory, resolve_device, resolve_dtype
from roofline_lib.core.progress import progress_bar
from roofline_lib.core.shapes import Shape
from roofline_lib.measure.ceilings import measure_ceilings
from roofline_lib.present.report import markdown_table, write_results
from roofline_lib.runs.decode import check_decoder, fastest_graphed, time_decode
from roofline_lib.variants.decode import DECODERS

# the rows: (name, shape with seq_len = context − 1, layers, decoders timed)
GRAPHED = ["graph_static_cache", "graph_split_kv", "graph_fused_split_kv", "graph_layer_kernel"]
ROWS = [
    ("short", Shape("d1", 1, 127, 512, 8), 12,
     ["naive", "growing_cache", "static_cache", *GRAPHED, "compile_static_cache"]),
    ("32k", Shape("d2", 1, 32767, 1024, 16), 4, ["growing_cache", "static_cache", *GRAPHED, "compile_static_cache"]),
    ("100k", Shape("d3", 1, 99999, 1024, 16), 2, [*GRAPHED, "compile_static_cache"]),
    ("B16 8k", Shape("d4", 16, 8191, 768, 12), 4, ["static_cache", *GRAPHED, "compile_static_cache"]),
]
SMOKE_ROWS = [("smoke", Shape("d0", 2, 31, 64, 4), 2,
               ["naive", "growing_cache", "static_cache", *GRAPHED, "compile_static_cache"])]
STACKS = [(12, 768, 12), (8, 1024, 16)]  # (layers, d_model, n_heads)
BATCHES = (1, 8, 64)
CONTEXTS = (128, 2048, 32768, 100_000)
CACHE_LIMIT_GIB = 60  # a stack whose cache needs more is left out, with the reason


def timed_form(name: str, graphed: bool) -> str:
    """The timed name of a decoder checked eagerly or graphed."""
    return f"graph_{name}" if graphed else name


def checks(dtypes, device, shapes, steps, only=frozenset()) -> pd.DataFrame:
    cases = [(name, graphed, dtype, padding, shape) for shape in shapes for dtype in dtypes
             for padding in ("none", "left") for name in DECODERS for graphed in (False, True)
             if (not graphed or name in STATIC_DECODERS) and (not only or timed_form(name, graphed) in only)]
    records = [check_decoder(name, shape, steps, dtype, device, padding, graphed=graphed)
               for name, graphed, dtype, padding, shape in progress_bar(cases, desc="decode §3", unit="check")]
    return pd.DataFrame.from_records(records)


def stack_grid(device, dtype, ceilings, budget, smoke, only=frozenset(),
               save: Callable[[pd.DataFrame], object] = lambda table: None) -> pd.DataFrame:
    """Tokens per second of model-sized stacks; `save` gets the table so far after every stack, so a run cut
    short keeps what it measured."""
    frames = []
    names = [name for name in GRAPHED if not only or name in only]
    grid = [(layers, d, h, b, ctx) for layers, d, h in STACKS for b in BATCHES for ctx in CONTEXTS]
    if smoke:
        grid = [(2, 64, 4, 2, 32)]
    for layers, d, h, batch, context in progress_bar(grid, desc="decode stacks", unit="stack"):
        cache_gib = layers * 2 * batch * context * d * torch.finfo(dtype).bits / 8 / 2**30
        shape = Shape("stack", batch, context - 1, d, h)
        if cache_gib > CACHE_LIMIT_GIB:
            frames.append(pd.DataFrame([{"shape": shape.label, "context": context, "layers": layers,
                                         "decoder": "-", "reason": f"cache {cache_gib:,.0f} GiB > {CACHE_LIMIT_GIB}"}]))
        else:
            table = time_decode(names, shape, layers, dtype, device, ceilings, budget)
            frames.append(table.assign(cache_gib=cache_gib))
            free_memory(device)
        save(pd.concat(frames, ignore_index=True))
    return pd.concat(frames, ignore_index=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the CSVs")
    parser.add_argument("--device", help="'cuda' or 'cpu' (default: cuda when a GPU is visible)")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of timed calls per measurement")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes: the code paths, not the numbers")
    parser.add_argument("--skip", default="", help="comma-separated parts to leave out: checks, rows, stacks")
    parser.add_argument("--only", default="", help="comma-separated decoders: the checks, rows and stacks take "
                                                         "these alone")
    parser.add_argument("--dtypes", default="fp16,bf16", help="comma-separated dtypes of the checks on a GPU")
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    skip = set(filter(None, args.skip.split(",")))
    only = frozenset(filter(None, args.only.split(",")))
    if "stacks" not in skip and only and not only & set(GRAPHED):
        raise SystemExit(f"--only names no decoder the stack grid times ({', '.join(GRAPHED)}): add one, or "
                         "--skip stacks")
    target_rows = SMOKE_ROWS if args.smoke else ROWS
    timed_in_rows = {name for *_, names in target_rows for name in names}
    if "rows" not in skip and only and not only & timed_in_rows:
        raise SystemExit(f"--only names no decoder the rows time ({', '.join(sorted(timed_in_rows))}): add one, or "
                         "--skip rows")
    env = environment(device, dtype)
    status = 0
    if "checks" not in skip:
        shapes = ([Shape("c1", 3, 37, 48, 4)] if args.smoke
                  else [Shape("c1", 4, 200, 512, 8), Shape("c2", 2, 3000, 1024, 16)])
        dtypes = ([torch.float32] if device.type != "cuda"
                  else [resolve_dtype(name, device) for name in args.dtypes.split(",")])
        checked = checks(dtypes, device, shapes, 3 if args.smoke else 6, only)
        path = write_results(checked.assign(**{k: v for k, v in env.items() if k != "dtype"}), args.out,
                             "decode_checks", env)
        print(markdown_table(checked[["shape", "decoder", "dtype", "padding", "err_ratio", "passed"]], floatfmt=".3g"))
        print(f"wrote {path}\n")
        status |= int(not checked.status.isin(["ok", "skipped"]).all())
    ceilings = measure_ceilings(device, dtype)
    print(f"ceilings: {ceilings.matmul_tflops:,.0f} TFLOP/s, {ceilings.copy_gbps:,.0f} GB/s ({ceilings.source})")
    if "rows" not in skip:
        rows = [(row, shape, layers, [n for n in names if not only or n in only])
                for row, shape, layers, names in target_rows]
        frames = []
        for row, shape, layers, names in progress_bar(rows, desc="decode rows", unit="row"):
            frames.append(time_decode(names, shape, layers, dtype, device, ceilings, args.budget).assign(row=row))
            timed = pd.concat(frames, ignore_index=True)
            path = write_results(timed.assign(**env), args.out, "decode_rows", env)
            free_memory(device)
        print(markdown_table(timed.reindex(columns=["row", "shape", "context", "layers", "decoder", "us_per_layer",
                                                    "floor_us", "fraction_of_floor", "tokens_per_s", "vs_speedup",
                                                    "vs_p20", "vs_p80", "first_call_s", "reason"]), floatfmt=".3g"))
        chosen = fastest_graphed(timed)
        if not chosen.empty:
            print("\nfastest (the graphed decoder of least µs per layer on each row, chosen by this run):\n"
                  + markdown_table(chosen[["row", "decoder", "us_per_layer", "fraction_of_floor", "first_call_s"]],
                                   floatfmt=".3g"))
        print(f"wrote {path}\n")
    if "stacks" not in skip:
        written = []
        stacks = stack_grid(device, dtype, ceilings, args.budget, args.smoke, only,
                            lambda table: written.append(write_results(table.assign(**env), args.out,
                                                                       "decode_stacks", env)))
        path = written[-1]
        print(markdown_table(stacks.reindex(columns=["shape", "context", "layers", "decoder", "us_per_layer",
                                                     "fraction_of_floor", "tokens_per_s", "first_call_s", "reason"]),
                             floatfmt=".3g"))
        print(f"wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
