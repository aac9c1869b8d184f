"""`roofline decode`: the layer token by token through a key/value cache — §3 for each decoder, then one step
of a stack timed against its floor, and the fastest graphed decoder by that timing; its result files; a run
stopped part-way resumed with --resume."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import torch

from ..core.catalog import DEFAULT_DECODERS
from ..core.checks import check_head_split
from ..core.device import environment, resolve_device, resolve_dtype
from ..core.shapes import Shape
from ..measure.ceilings import measure_ceilings
from ..present.report import markdown_table, slug
from ..runs.decode import fastest_graphed, run_decode
from ..runs.sweep import settings_file
from .output import make_folders, output_folders, refuse_overwrite, refuse_stale_checkpoint, resume_command
from .parser import INTERRUPTED
from .selection import check_device

CHECK_PROMPT = 256  # the §3 check's prompt is at most this long: its truth runs the naive layer on every token
CHECK_COLUMNS = ["decoder", "dtype", "padding", "steps", "status", "err_ratio", "reason"]
TIME_COLUMNS = ["decoder", "status", "us_per_layer", "floor_us", "fraction_of_floor", "tokens_per_s", "vs_speedup",
                "vs_p20", "vs_p80", "first_call_s", "reason"]
DECODE_CHECKPOINT = "decode_partial.csv"  # a stopped decode run's finished checks (and timing), in its --out folder


def decode_shape(args: argparse.Namespace, cuda: bool) -> tuple[Shape, int]:
    """The timed step's shape (its seq_len is the prompt: --context − 1) and the stack's layers, defaults filled."""
    context = args.context or (128 if cuda else 32)
    d_model = args.d_model or (512 if cuda else 64)
    n_heads = args.n_heads or (8 if cuda else 4)
    check_head_split(d_model, n_heads)
    return Shape("decode", args.batch, context - 1, d_model, n_heads), args.layers or (12 if cuda else 2)


def cmd_decode(args: argparse.Namespace, argv: list[str]) -> int:
    device = resolve_device(args.device)
    check_device(args, device, torch.cuda.device_count())
    dtype = resolve_dtype(args.dtype, device)
    shape, layers = decode_shape(args, device.type == "cuda")
    names = args.variants or list(DEFAULT_DECODERS)
    env = environment(device, dtype)
    stem = f"decode_{slug(env['device'])}_{env['dtype']}_{env['date']}_B{shape.batch}_N{shape.seq_len + 1}"
    out, _ = output_folders(args, slug(env["device"]), env["dtype"])
    refuse_overwrite([out / f"{stem}_checks.csv", out / f"{stem}.csv", out / f"{stem}.md"], args.overwrite)

    refuse_stale_checkpoint(out, args, DECODE_CHECKPOINT)
    print(f"decode: {shape.label} + 1 token, {layers} layers, {len(names)} decoder(s) on {env['device']} "
          f"({env['dtype']}) → {out}/", flush=True)
    checked = Shape("check", shape.batch, min(shape.seq_len, CHECK_PROMPT), shape.d_model, shape.n_heads)
    make_folders(out)
    checkpoint = out / DECODE_CHECKPOINT
    try:
        checks, timed = run_decode(names, shape, checked, layers, args.steps, dtype, device,
                                   measure_ceilings(device, dtype), args.budget, args.seed, checkpoint, args.resume)
    except KeyboardInterrupt:
        print(f"interrupted: what finished is kept in {checkpoint}; resume with: {resume_command(argv, out)}",
              file=sys.stderr)
        return INTERRUPTED
    write_decode_results(checks.assign(**env), timed.assign(**env), out / stem,
                         f"{env['device']}, torch {env['torch']}, triton {env['triton']}, {env['dtype']}, "
                         f"{env['date']}; {shape.label} + 1 token, {layers} layers")
    for path in (checkpoint, settings_file(checkpoint)):
        path.unlink(missing_ok=True)
    ran = checks.status.isin(["ok", "skipped"]).all() and timed.status.isin(["ok", "skipped"]).all()
    return 0 if ran else 1


def write_decode_results(checks: pd.DataFrame, timed: pd.DataFrame, stem: Path, context: str) -> None:
    """`stem`_checks.csv, `stem`.csv and `stem`.md; the markdown printed as well."""
    checks.to_csv(f"{stem}_checks.csv", index=False)
    timed.to_csv(f"{stem}.csv", index=False)
    text = (f"{context}. §3 on the stepped rows (left-padded prompts; passes up to an error ratio of 2):\n\n"
            + markdown_table(checks[CHECK_COLUMNS], floatfmt=".3g")
            + "\n\nOne step, µs per layer; the floor is the step's fewest bytes over the measured copy bandwidth:\n\n"
            + markdown_table(timed.reindex(columns=TIME_COLUMNS), floatfmt=".3g") + "\n")
    chosen = fastest_graphed(timed)
    if not chosen.empty:
        text += (f"\nfastest here, by this timing: {chosen.decoder.iloc[0]} "
                 f"(its first call took {chosen.first_call_s.iloc[0]:.3g} s)\n")
    Path(f"{stem}.md").write_text(text)
    print(text)
    print(f"wrote {stem}_checks.csv, {stem}.csv and {stem}.md")
