"""Every layer the project can build by name: the ladder (`VARIANTS`) and the peers (`PEERS`), in that order.

A factory that takes a `timer` (a layer that chooses by measurement, `fastest`) is handed the project's one
protocol here, `measure.timing.time_layer_calls`, so that the layer itself owns no clock.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence

from torch import nn

from ..core.reference import ReferenceLayer
from ..measure.timing import time_layer_calls
from . import VARIANTS
from .peers import PEERS


def _timed(factory: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    """`factory` with the one protocol as its `timer`, where it takes one (its docstring kept, for `describe`)."""
    if "timer" not in inspect.signature(factory).parameters:
        return factory
    return functools.wraps(factory)(functools.partial(factory, timer=time_layer_calls))


def factories() -> dict[str, Callable[..., nn.Module]]:
    """Name → factory for every rung, then every peer (read afresh: tests and notebooks may add entries)."""
    return {name: _timed(factory) for name, factory in {**VARIANTS, **PEERS}.items()}


def select_variants(spec: str | None, also: Sequence[str] = ()) -> list[str]:
    """Variant or peer names from a comma-separated spec (None: every rung of the ladder, in order), or names of
    `also` (layers a caller builds itself, such as `stack.build_layer`'s).

    An empty spec, an unknown name or a name given twice is a ValueError that says so."""
    if spec is None:
        return list(VARIANTS)
    if not isinstance(spec, str):
        raise ValueError(f"a variant spec is a comma-separated string of names, got {type(spec).__name__}")
    known = [*factories(), *also]
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise ValueError(f"no variant named in {spec!r}: known variants are {', '.join(known)}")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown variant {', '.join(map(repr, unknown))}: known variants are {', '.join(known)}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"variant {', '.join(map(repr, twice))} named more than once in {spec!r}")
    return names


def _one_name(name: str, caller: str) -> str:
    """`name` checked as a single known variant or peer (ValueError naming the known ones if it is not)."""
    names = select_variants(name) if isinstance(name, str) else []
    if len(names) != 1:
        raise ValueError(f"{caller} takes one variant name, got {name!r}")
    return names[0]


def describe(name: str) -> str:
    """What variant (or peer) `name` is: its factory docstring's first paragraph, on one line."""
    doc = inspect.getdoc(factories()[_one_name(name, "describe")]) or ""
    return " ".join(doc.split("\n\n")[0].split())


def build_variant(name: str, ref: ReferenceLayer, **options) -> nn.Module:
    """The variant (or peer) `name` built on `ref` (ValueError naming the known ones if `name` is not one)."""
    return factories()[_one_name(name, "build_variant")](ref, **options)
