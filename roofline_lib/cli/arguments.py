"""The arguments on their own: argparse `type=` functions, and the checks that need nothing but the arguments.

No torch here (the parser uses these). A `type=` function's error is argparse's: the subcommand's usage, then
one `error:` line. A check of `check_args` raises ValueError with one line, which `main` prints as `error: …`.
"""
from __future__ import annotations

import argparse
import math
import re

from ..core.catalog import LADDER, PEERS, TIMED_DECODERS
from ..core.lists import known_names

_DEVICE = re.compile(r"cpu|cuda(:\d+)?")
VARIANT_NAMES = LADDER + PEERS


def device_arg(text: str) -> str:
    """`--device`: 'cpu', 'cuda' or 'cuda:N'."""
    name = text.strip()
    if not _DEVICE.fullmatch(name):
        raise argparse.ArgumentTypeError(f"invalid device {text!r}: use cpu, cuda or cuda:N (e.g. cuda:1)")
    return name


def variant_names(text: str) -> list[str]:
    """`--variants`: distinct names of the ladder and the peers; a misspelled one gets the closest name."""
    return known_names(text, VARIANT_NAMES, "variant")


def decoder_names(text: str) -> list[str]:
    """`decode --variants`: distinct decoders, each eager, "graph_…" or "compile_…" (the peer)."""
    return known_names(text, TIMED_DECODERS, "decoder")


def _at_least(flag: str, value: float | None, low: float) -> None:
    if value is not None and not (math.isfinite(value) and value >= low):
        bound = f"at least {low:g}" if low > 0 else "0 or more"
        raise ValueError(f"{flag} must be {bound}, got {value:g}")


def _positive(flag: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(f"{flag} must be a positive number, got {value:g}")


def _check_variants(args: argparse.Namespace) -> None:
    """--against and --chunk-size against --variants (None: the whole ladder)."""
    names = args.variants or list(LADDER)
    if args.against is not None and args.against not in names:
        raise ValueError(f"--against {args.against} is not one of --variants ({', '.join(names)})")
    if args.against is not None and len(names) == 1:
        raise ValueError(f"--against {args.against} is the only variant: add another to --variants to compare with")
    if args.chunk_size is not None and "chunked" not in names:
        raise ValueError("--chunk-size sets the 'chunked' variant's chunks, but 'chunked' is not among --variants")


def check_args(args: argparse.Namespace) -> None:
    """The checks that need only the arguments: numbers and their combinations."""
    if args.command == "run":
        _at_least("--gpus", args.gpus, 1)
        _at_least("--budget", args.budget, 0)
        _at_least("--chunk-size", args.chunk_size, 1)
        _positive("--memory-cap-gib", args.memory_cap_gib)
        _check_variants(args)
    if args.command in ("run", "decode") and args.resume and args.out is None:
        raise ValueError("--resume continues the run in an existing folder: name it with --out")
    if args.command == "profile":
        _at_least("--wait", args.wait, 0)
        _at_least("--warmup", args.warmup, 0)
        _at_least("--active", args.active, 1)
    elif args.command == "longctx":
        for flag in ("--seq-len", "--batch", "--d-model", "--n-heads"):
            _at_least(flag, getattr(args, flag[2:].replace("-", "_")), 1)
        if args.d_model % args.n_heads:
            raise ValueError(f"--d-model {args.d_model} is not divisible by --n-heads {args.n_heads}")
        _at_least("--reps", args.reps, 1)
        _at_least("--budget", args.budget, 0)
        _positive("--memory-cap-gib", args.memory_cap_gib)
    elif args.command == "decode":
        for flag in ("--batch", "--context", "--d-model", "--n-heads", "--layers", "--steps"):
            _at_least(flag, getattr(args, flag[2:].replace("-", "_")), 1)
        if args.d_model is not None and args.n_heads is not None and args.d_model % args.n_heads:
            raise ValueError(f"--d-model {args.d_model} is not divisible by --n-heads {args.n_heads}")
        if args.context is not None and args.context < 2:
            raise ValueError(f"--context {args.context}: a step needs a prompt of at least one token before it")
        _at_least("--budget", args.budget, 0)
