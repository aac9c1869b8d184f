"""Comma-separated lists typed by a person (a command line, a notebook's text box), checked in one place.

Each parser is an argparse `type=` function and a plain one: `ListError` is both argparse's ArgumentTypeError
(so argparse prints its message as it is) and a ValueError (so every other caller catches it as bad input).
No torch here: the command line's parser uses these before anything heavy is imported.
"""
from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence

from .catalog import ATTENTION_CHOICES


class ListError(argparse.ArgumentTypeError, ValueError):
    """A list that does not parse, in one line."""


def _items(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def did_you_mean(word: str, known: Sequence[str]) -> str:
    """" (did you mean X?)" for the closest of `known` to a misspelled `word`, else ""."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def check_distinct(text: str, values: Sequence) -> None:
    """ListError naming the values that `text` gives more than once."""
    repeated = list(dict.fromkeys(v for v in values if list(values).count(v) > 1))
    if repeated:
        raise ListError(f"{text!r} names {', '.join(map(str, repeated))} more than once")


def positive_ints(text: str) -> list[int]:
    """Distinct positive integers from a text such as "4096,16384" (blank items are skipped)."""
    parts = _items(text)
    bad = [p for p in parts if not (p.isdigit() and int(p) >= 1)]
    if bad or not parts:
        raise ListError(f"{text!r}: use comma-separated positive integers, e.g. 4096,16384"
                        + (f" ({bad[0]!r} is not one)" if bad else ""))
    values = [int(p) for p in parts]
    check_distinct(text, values)
    return values


def known_names(text: str, known: Sequence[str], what: str) -> list[str]:
    """Distinct names of `known` from a comma-separated text; an unknown one gets the closest known name."""
    names = _items(text)
    if not names:
        raise ListError(f"{text!r} names no {what}: use some of {', '.join(known)}")
    for name in names:
        if name not in known:
            raise ListError(f"unknown {what} {name!r}{did_you_mean(name, known)}; use some of {', '.join(known)}")
    check_distinct(text, names)
    return names


def attention_spec(text: str) -> str:
    """The chunk-attention option: 'all' (alone), or distinct strategy names and 'auto', comma-separated."""
    if text.strip() == "all":
        return "all"
    if "all" in _items(text):
        raise ListError(f"{text!r}: 'all' stands alone")
    return ",".join(known_names(text, ATTENTION_CHOICES, "attention strategy"))
