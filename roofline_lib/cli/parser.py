"""The command line's parser: every command, option, default and help text. Building it imports no torch,
pandas, matplotlib or triton (names come from `core.catalog`), so `--help` and `--version` are fast."""
from __future__ import annotations

import argparse
import sys

from ..core.catalog import (
    ATTENTION_STRATEGIES,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_DECODERS,
    DTYPE_NAMES,
    LADDER,
    PADDINGS,
    PEERS,
    TIMED_DECODERS,
)
from ..core.lists import attention_spec, positive_ints
from .arguments import decoder_names, device_arg, variant_names

PROG = "roofline"
INTERRUPTED = 130  # the exit status of a command stopped by Ctrl-C (128 + SIGINT, as a shell reports it)
CPU_SEQ_LEN = 2048  # longctx's default sequence length on the CPU (100,000 on CUDA)
CUDA_SEQ_LEN = 100_000
DEFAULT_OUT = "runs/DEVICE_DTYPE_YYYYmmdd-HHMMSS/ in the current folder, UTC time, git-ignored"


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: …)" to each option's help, unless the help says its default in words already
    or there is nothing to show (a flag, or a default that depends on the machine)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("(default" in text or action.default is None or action.default is False
                or action.default is argparse.SUPPRESS or not action.option_strings):
            return text
        return super()._get_help_string(action)


def version() -> str:
    """This package's version: `roofline_lib.__version__`, else the installed distribution's."""
    package = sys.modules.get(__name__.split(".")[0])
    found = getattr(package, "__version__", None)
    if found:
        return str(found)
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version
    try:
        return dist_version("roofline_lib")
    except PackageNotFoundError:
        return "unknown"


def _names(items: tuple[str, ...]) -> str:
    return ", ".join(items)


VARIANTS_HELP = (f"comma-separated variants: the ladder ({_names(LADDER)}) and the torch.compile peers "
                 f"({_names(PEERS)})")


def _add_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", type=device_arg, metavar="{cpu,cuda,cuda:N}",
                        help="where to run (default: cuda when a GPU is visible, else cpu)")
    parser.add_argument("--dtype", choices=DTYPE_NAMES,
                        help="floating-point type of weights and inputs (default: fp16 on CUDA, fp32 on the CPU)")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and inputs")


def _add_rows(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument("--rows", help=f"rows of the suite, e.g. '1-13', '1,6,9', 's1', 'smoke' or 'suite', or a "
                                       f"shape of your own such as 'B4 N1000 d512 H8' (default: {default})")


def _add_output(parser: argparse.ArgumentParser, what: str, figures: bool = True) -> None:
    parser.add_argument("--out", help=f"folder for {what} (default: {DEFAULT_OUT})")
    if figures:
        parser.add_argument("--figures", help="folder for the figures (default: the --out folder)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the files of an earlier run in the same folder (refused without it)")


def _add_force(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true",
                        help="run on the CPU even what is estimated to take more than an hour or more memory "
                             "than this machine has (refused without it)")


def _add_memory_cap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--memory-cap-gib", type=float, metavar="GIB",
                        help="cap this process's GPU memory at GIB (emulates a smaller GPU; CUDA only); "
                             "out-of-memory is reported, not fatal (default: no cap)")


def _add_padding(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--padding", default="none", choices=PADDINGS, help="padding pattern of the inputs")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=_HelpFormatter, allow_abbrev=False,  # --context is not --context-parallel
        description="Verify, time and profile the Transformer-layer ladder. "
                    f"Run as `{PROG} COMMAND …` or `python -m roofline_lib COMMAND …`.",
        epilog=f"`{PROG} COMMAND --help` lists a command's options and their defaults.")
    parser.add_argument("--version", action="version", version=f"roofline_lib {version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", formatter_class=_HelpFormatter, allow_abbrev=False,
                              help="sweep variants × shapes: verify, time, write CSV, tables and plots",
                              description="Sweep variants × shapes: verify each against the float64 truth "
                                          "(§3), time it interleaved with the reference, and write a CSV, "
                                          "markdown tables and plots.")
    _add_rows(run, "the full suite on CUDA, the smoke suite on the CPU")
    run.add_argument("--variants", type=variant_names, help=f"{VARIANTS_HELP} (default: the whole ladder)")
    _add_device(run)
    _add_padding(run)
    run.add_argument("--budget", type=float, default=1.0,
                     help="seconds of timed calls per row; 0 gives the fewest rounds the timer allows")
    run.add_argument("--against", metavar="VARIANT",
                     help="also compare every variant with this one of --variants (e.g. compile_kept), "
                          "interleaved like the reference (default: only against the reference)")
    run.add_argument("--chunk-size", type=int, metavar="N",
                     help=f"chunk size of the 'chunked' variant (default: {DEFAULT_CHUNK_SIZE})")
    _add_memory_cap(run)
    run.add_argument("--gpus", type=int, default=1,
                     help="split the rows over this many GPUs of this host, one process each; their logs and "
                          "shares go to OUT/gpuI/")
    _add_output(run, "the CSV, markdown tables and figures")
    _add_force(run)
    run.add_argument("--resume", action="store_true",
                     help="continue a run stopped part-way in --out (OUT/run_partial.csv): keep its finished "
                          "rows, sweep the rest; needs an explicit --out")

    prof = commands.add_parser("profile", formatter_class=_HelpFormatter, allow_abbrev=False,
                               help="torch.profiler per op, kernel and category; the share spent on masks",
                               description="Profile each variant on each row with torch.profiler: time per op, "
                                           "kernel and category, and the share spent building and applying "
                                           "masks.")
    _add_rows(prof, "the suite rows where the reference fits on CUDA, the smoke suite on the CPU")
    prof.add_argument("--variants", type=variant_names, help=f"{VARIANTS_HELP} (default: the whole ladder)")
    _add_device(prof)
    prof.add_argument("--wait", type=int, default=1, help="calls skipped before the profiler starts")
    prof.add_argument("--warmup", type=int, default=2, help="calls traced but discarded")
    prof.add_argument("--active", type=int, default=3, help="calls recorded; times are their mean")
    _add_output(prof, "the CSV tables and figures")
    _add_force(prof)

    long = commands.add_parser("longctx", formatter_class=_HelpFormatter, allow_abbrev=False,
                               help="chunked vs full-sequence layer at long context: error on sampled rows, "
                                    "time, TFLOP/s, memory, attention strategy × chunk size",
                               description="The chunked layer against the full-sequence layer at long context: "
                                           "§3 error on sampled rows, time, TFLOP/s and memory for every "
                                           "attention strategy × chunk size, under an optional memory cap.")
    long.add_argument("--seq-len", type=int, metavar="N",
                      help=f"tokens per sequence, e.g. 100000 or 1000000 (default: {CUDA_SEQ_LEN} on CUDA, "
                           f"{CPU_SEQ_LEN} on the CPU)")
    long.add_argument("--batch", type=int, default=1, help="sequences per call")
    long.add_argument("--d-model", type=int, default=1024, help="model width (a multiple of --n-heads)")
    long.add_argument("--n-heads", type=int, default=16, help="attention heads")
    long.add_argument("--chunk-sizes", type=positive_ints, metavar="SIZES",
                      help=f"comma-separated chunk sizes of the chunked layer (default: {DEFAULT_CHUNK_SIZE} on "
                           f"CUDA; on the CPU N/4 and N/2 for --seq-len N, so that it really chunks)")
    long.add_argument("--attention", type=attention_spec, default="all",
                      help=f"comma-separated chunk-attention strategies ({_names(ATTENTION_STRATEGIES)}), "
                           f"'auto' (the one the chunked layer picks here), or 'all' (every strategy that can "
                           f"run on the device; on CUDA all but split_math)")
    _add_memory_cap(long)
    _add_padding(long)
    long.add_argument("--budget", type=float, default=1.0,
                      help="seconds of timed calls per measurement; 0 gives the fewest rounds the timer allows")
    long.add_argument("--reps", type=int, help="exactly this many timed calls instead of --budget, e.g. 3 at "
                                               "1M tokens (default: as many as --budget allows)")
    long.add_argument("--context-parallel", action="store_true",
                      help="the context-parallel layer instead: the sequence split over the processes that "
                           "torchrun starts (`torchrun --nproc-per-node P -m roofline_lib longctx "
                           "--context-parallel …`; gloo on the CPU, NCCL on GPUs; without torchrun, P = 1), "
                           "checked on sampled rows and timed over --reps calls (default 3); rank 0 writes; the first "
                           "of --chunk-sizes is the query chunk of the pairs the causal mask cuts")
    _add_device(long)
    _add_output(long, "the CSV and markdown table", figures=False)

    dec = commands.add_parser("decode", formatter_class=_HelpFormatter, allow_abbrev=False,
                              help="the layer one token at a time through a key/value cache: §3 on the stepped "
                                   "rows, µs per layer per step against the floor, tokens per second",
                              description="Decode: prefill a prompt, then step one token per sequence through a "
                                          "stack of layers with a key/value cache. Each decoder is checked by §3 "
                                          "(the steps against the full-sequence layer, with left-padded prompts), "
                                          "then timed interleaved under the one protocol beside the step's floor.")
    dec.add_argument("--batch", type=int, default=1, help="sequences decoded together")
    dec.add_argument("--context", type=int, help="positions attended at the timed step, prompt included "
                                                 "(default: 128 on CUDA, 32 on the CPU)")
    dec.add_argument("--d-model", type=int, help="model width (default: 512 on CUDA, 64 on the CPU)")
    dec.add_argument("--n-heads", type=int, help="attention heads (default: 8 on CUDA, 4 on the CPU)")
    dec.add_argument("--layers", type=int, help="layers in the stack (default: 12 on CUDA, 2 on the CPU)")
    dec.add_argument("--steps", type=int, default=4, help="tokens stepped in the §3 check")
    dec.add_argument("--variants", type=decoder_names,
                     help=f"comma-separated decoders ({_names(TIMED_DECODERS)}; graph_: replayed from a CUDA graph, "
                          "compile_: torch.compile's reduce-overhead, the peer) "
                          f"(default: {','.join(DEFAULT_DECODERS)})")
    dec.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls; 0 gives the fewest rounds")
    _add_device(dec)
    _add_output(dec, "the CSV and markdown tables", figures=False)
    dec.add_argument("--resume", action="store_true",
                     help="continue a decode run stopped part-way in --out (OUT/decode_partial.csv): keep its "
                          "finished checks, do the rest; needs an explicit --out")
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """`argv` parsed; an option no command knows is reported with that command's usage line (argparse alone
    would show the top-level one), and argparse exits with status 2."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args
