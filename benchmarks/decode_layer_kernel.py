"""The persistent decode-layer kernel tuned: µs per layer per step of `graph_layer_kernel` for each configuration
(tiles, fc2's split, warps and stages, programs per SM: `WholeLayerConfig.parse`'s "MxNxK/S[/wWsT][/pP]"), and
its phases launched one by one, beside the default decoder `graph_fused_split_kv`, interleaved, on the decode
rows of `benchmarks.decode`; which configuration to keep, and what the grid barriers cost against launches.

    python -m benchmarks.decode_layer_kernel --out OUT                      # on a GPU with compute capability 9+
    python -m benchmarks.decode_layer_kernel --out OUT --configs 16x64x128/4/w4s3,16x32x128/1/w4s3
    python -m benchmarks.decode_layer_kernel --out OUT --configs "" \
        --only "graph_fused_split_kv,graph_fused_split_kv no-PDL"      # a baseline's option A/B, interleaved
    python -m benchmarks.decode_layer_kernel --out OUT --configs "" --no-profile \
        --only "graph_fused_split_kv,graph_fused_split_kv no-GEMV"     # B = 1: the GEMV against the tiles
    python -m benchmarks.decode_layer_kernel --out OUT --configs "" --rows short --contexts 128,512,2048 \
        --only "graph_fused_split_kv,graph_fused_split_kv 1-range"     # one key range and no merge, or the split

Every configuration is checked by §3 (left padding, fp16, graphed; the peer as its static-cache decoder, graphed:
`benchmarks.decode` checks the decoders, not the compiled step) before it is timed; one that fails or cannot
run is reported with its one-line reason. Times come from `runs.decode.time_decode`, as every decode table's.
Last, where the time goes: one layer's eager step profiled, kernel by kernel, for `fused_split_kv` and for the
layer kernel's phases launched one by one (`--no-profile` leaves it out).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

import pandas as pd
import torch

from benchmarks.decode import ROWS
from roofline_lib.core.checks import parse_lengths
from roofline_lib.core.device import environment, free_memory
from roofline_lib.core.outcome import first_line
from roofline_lib.core.progress import progress_bar
from roofline_lib.core.shapes import Shape
from roofline_lib.kernels.decode_layer import PHASE_NAMES, phases_run
from roofline_lib.kernels.whole_layer import WholeLayerConfig
from roofline_lib.measure.ceilings import measure_ceilings
from roofline_lib.measure.profiler import kernel_timeline
from roofline_lib.present.report import markdown_table, write_results
from roofline_lib.runs.decode import PEER, check_decoder, decode_case, time_decode
from roofline_lib.variants.decode import LayerKernelDecoder, build_decoder, layer_kernel_unavailable_reason

CONFIGS = ("16x32x128/4/w4s3", "16x32x128/4/w4s3/p2", "16x32x128/4/w4s3u", "16x32x128/4/w4s3u/p2",
           "16x64x128/4/w4s3/p2")
BASELINE = "graph_fused_split_kv"
CHECK_SHAPE = Shape("c1", 4, 200, 512, 8)


def candidates(configs):
    """(timed name, decoder, build options) of everything timed: the peer; the baseline (its GEMMs launched by
    programmatic dependent launch, at B = 1 in fused_linear's CUDA-core GEMV), alone, with plain launches, with the
    tensor-core tiles at B = 1 too (at B 16 the same GEMMs: a control), over one key range per (sequence, head) (no
    merge: what it saves at short contexts), with its attention and merge dependent too, and with its attention
    prefetching the later GEMMs' weights into L2; the layer kernel's default (its
    configuration chosen per row by `decode_layer.default_config`), over one key range per (sequence, head) (no
    merge phase: what it saves at short contexts) and prefetching its later weights; each configuration; the
    default's phases. A configuration's name is `graph_layer_kernel` labelled by it (`runs.decode.time_decode`)."""
    return ([(PEER, "static_cache", {}), (BASELINE, "fused_split_kv", {}),
             (f"{BASELINE} no-PDL", "fused_split_kv", {"pdl": False}),
             (f"{BASELINE} no-GEMV", "fused_split_kv", {"gemv": False}),
             (f"{BASELINE} 1-range", "fused_split_kv", {"n_splits": 1}),
             (f"{BASELINE} PDL-all", "fused_split_kv", {"pdl_attention": True}),
             (f"{BASELINE} L2-prefetch", "fused_split_kv", {"prefetch": True}),
             ("graph_layer_kernel default", "layer_kernel", {}),
             ("graph_layer_kernel default 1-range", "layer_kernel", {"n_splits": 1}),
             ("graph_layer_kernel default L2-prefetch", "layer_kernel", {"prefetch": True})]
            + [(f"graph_layer_kernel {label}", "layer_kernel", {"config": WholeLayerConfig.parse(label)})
               for label in configs]
            + [("graph_layer_kernel default phases", "layer_kernel", {"phases": True})])


def check(decoder, options, device) -> str:
    """'' where the candidate passes §3 (left padding, fp16, graphed), else the one-line reason it does not."""
    try:
        record = check_decoder(decoder, CHECK_SHAPE, 4, torch.float16, device, "left", graphed=True, **options)
    except (RuntimeError, ValueError) as exc:
        return f"error: {first_line(exc)}"
    return "" if record["status"] == "ok" else f"{record['status']}: {record['reason']}"


def named_phases(line: pd.DataFrame, run: tuple[int, ...]) -> pd.DataFrame:
    """A profiled step's kernels with the layer kernel's launches (its phases one by one, in order) named by the
    phase each runs; the step's other kernels (the position's advance and rewind, a copy) keep their names."""
    launches = line.name.str.contains("decode_layer_kernel").to_numpy()
    if launches.sum() != len(run):
        raise RuntimeError(f"profiled {launches.sum()} launches of the layer kernel, expected {len(run)}")
    named = line.copy()
    named.loc[launches, "name"] = [f"phase {PHASE_NAMES[i]}" for i in run]
    return named


def step_kernels(row, shape, decoder, options, device) -> pd.DataFrame:
    """One layer's eager step of `decoder` on `shape` profiled: each kernel's name and µs; the layer kernel's
    launches (its phases one by one) named by the phase they run."""
    case = decode_case(shape, 1, torch.float16, device, "none")
    N = shape.seq_len
    layer = build_decoder(decoder, case.layer, N + 1, **options)
    layer.prefill(case.x[:, :N])
    x_t = case.x[:, N:N + 1].contiguous()  # (B, 1, C), as the layer before hands it over: no copy in the step

    def call(_x, _mask) -> None:
        layer.step(x_t)
        layer.rewind()

    line = kernel_timeline(call, x_t)
    if isinstance(layer, LayerKernelDecoder):
        line = named_phases(line, phases_run(layer.n_splits, layer.config.split))
    return line.assign(row=row, decoder=decoder)[["row", "decoder", "name", "duration_us", "gap_before_us"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the CSV")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated configurations")
    parser.add_argument("--budget", type=float, default=0.2, help="seconds of timed calls per measurement")
    parser.add_argument("--rows", default="", help="comma-separated rows of benchmarks.decode (default: all)")
    parser.add_argument("--only", default="", help="comma-separated candidates to time (default: all of them)")
    parser.add_argument("--contexts", default="",
                        help="comma-separated cache capacities to run each row at instead of its own (a crossover)")
    parser.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True,
                        help="profile one layer's step kernel by kernel too (default: on)")
    args = parser.parse_args(argv)
    try:
        chosen = candidates([c for c in args.configs.split(",") if c])
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    if only := [label.strip() for label in args.only.split(",") if label.strip()]:
        if unknown := [label for label in only if label not in [c[0] for c in chosen]]:
            raise SystemExit(f"unknown candidate {', '.join(map(repr, unknown))}: "
                             f"use {', '.join(c[0] for c in chosen)}")
        chosen = [c for c in chosen if c[0] in only]
    wanted = [row.strip() for row in args.rows.split(",") if row.strip()]
    known = [row for row, *_ in ROWS]
    if unknown := [row for row in wanted if row not in known]:
        raise SystemExit(f"unknown row {', '.join(map(repr, unknown))}: use {', '.join(known)}")
    rows = [(row, shape, layers) for row, shape, layers, _ in ROWS if not wanted or row in wanted]
    if args.contexts:
        try:  # a capacity holds the prompt and the stepped token: 2 at least
            contexts = list(dict.fromkeys(parse_lengths(args.contexts, "--contexts", minimum=2)))
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        rows = [(f"{row} at {c}", dataclasses.replace(shape, seq_len=c - 1), layers)
                for row, shape, layers in rows for c in contexts]  # capacity = prompt + the one stepped token
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark times a GPU kernel: no GPU is visible")
    device = torch.device("cuda")
    if (why := layer_kernel_unavailable_reason(device, torch.float16)) is not None:
        raise SystemExit(f"the layer kernel cannot run here: {why}")
    checks = {label: check(decoder, options, device)
              for label, decoder, options in progress_bar(chosen, desc="§3", unit="candidate")}
    passed = [c for c in chosen if not checks[c[0]]]
    ceilings = measure_ceilings(device, torch.float16)
    failed = pd.DataFrame([{"candidate": label, "reason": why} for label, why in checks.items() if why])
    env = environment(device, torch.float16)
    records = []
    for row, shape, layers in progress_bar(rows, desc="rows", unit="row"):
        records.append(time_decode([label for label, *_ in passed], shape, layers, torch.float16, device, ceilings,
                                   args.budget, options={label: options for label, _, options in passed},
                                   against=BASELINE).assign(row=row))
        free_memory(device)
        table = pd.concat(records, ignore_index=True).rename(columns={"decoder": "candidate"})
        path = write_results(pd.concat([table, failed], ignore_index=True).assign(**env), args.out,
                             "decode_layer_kernel", env)  # after each row: what was measured is kept if stopped
    print(markdown_table(table.reindex(columns=["row", "candidate", "us_per_layer", "fraction_of_floor", "vs_speedup",
                                                "vs_p20", "vs_p80", "reason"]), floatfmt=".3g"))
    if not failed.empty:
        print("\nleft out by §3 or their build:\n" + markdown_table(failed))
    print(f"wrote {path}")
    if args.profile:
        layer_kernel = {"phases": True}
        kernels = pd.concat([step_kernels(row, shape, name, options, device) for row, shape, _ in rows
                             for name, options in (("fused_split_kv", {}), ("layer_kernel", layer_kernel))],
                            ignore_index=True)
        path = write_results(kernels.assign(**env), args.out, "decode_step_kernels", env)
        print("\none layer's eager step, kernel by kernel (profiled):\n"
              + markdown_table(kernels.assign(name=kernels.name.str.slice(0, 60)), floatfmt=".3g"))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
