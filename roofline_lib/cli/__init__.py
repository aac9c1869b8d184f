"""The command line: `roofline run …` (the headless sweep of variants × suite), `roofline profile …` (where the
time goes), `roofline longctx …` (the chunked layer at long context) and `roofline decode …` (token by token
through a key/value cache); `python -m roofline_lib …` is the same.

`main` is the one place that turns an error into one line and an exit status. Every argument is checked before
any work starts, and nothing is written until then. The parser imports no torch; a command's module (and with
it torch) is imported only once that command is chosen, so `--help` and `--version` are fast.
"""
from __future__ import annotations

import os
import sys

from .arguments import check_args
from .parser import INTERRUPTED, parse_args


def _command(name: str):
    if name == "run":
        from .run import cmd_run
        return cmd_run
    if name == "profile":
        from .profile import cmd_profile
        return cmd_profile
    if name == "decode":
        from .decode import cmd_decode
        return cmd_decode
    from .longctx import cmd_longctx
    return cmd_longctx


def _reports() -> bool:
    """Whether this process reports errors: not a torchrun worker other than rank 0 (rank 0 says it for all)."""
    return "TORCHELASTIC_RUN_ID" not in os.environ or os.environ.get("RANK", "0") == "0"


def _fail(line: str, status: int) -> int:
    if _reports():
        print(f"error: {' '.join(line.splitlines())}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (argparse exits with status 2 and the command's usage on a malformed option), check it,
    run the command. Bad input (a ValueError) ends it with one line `error: …` and status 2; a file or folder
    that cannot be written (an OSError) with one line and status 1; Ctrl-C, outside a run's own handling
    (which keeps its finished rows), with one line and status 130."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    try:
        check_args(args)
        return _command(args.command)(args, argv)
    except ValueError as exc:
        return _fail(str(exc), 2)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        return _fail(f"{where}{exc.strerror or exc}", 1)
    except KeyboardInterrupt:
        if _reports():
            print("interrupted", file=sys.stderr)
        return INTERRUPTED
