"""The shape suite of docs/design.md §2 and the tiny CPU smoke suite."""
from __future__ import annotations

import re
from dataclasses import dataclass

from .checks import check_positive_int
from .lists import did_you_mean


def shape_label(batch: int, seq_len: int, d_model: int, n_heads: int | None = None) -> str:
    """How every table writes a shape: "B4 N1000 d512 H8" ("B4 N1000 d512" where the heads are not known)."""
    return f"B{batch} N{seq_len} d{d_model}" + ("" if n_heads is None else f" H{n_heads}")


@dataclass(frozen=True)
class Shape:
    """One input shape for the layer: `x` is (batch, seq_len, d_model)."""

    row: str  # "1".."14" for the suite, "s1".. for the smoke suite
    batch: int
    seq_len: int
    d_model: int
    n_heads: int
    note: str = ""

    def __post_init__(self) -> None:
        for name in ("batch", "seq_len", "d_model", "n_heads"):
            check_positive_int(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) is not divisible by n_heads ({self.n_heads})")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def d_ff(self) -> int:
        return 4 * self.d_model

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len

    @property
    def label(self) -> str:
        return shape_label(self.batch, self.seq_len, self.d_model, self.n_heads)


def _rows(prefix: str, table: list[tuple]) -> tuple[Shape, ...]:
    return tuple(Shape(f"{prefix}{i}", *spec) for i, spec in enumerate(table, start=1))


SUITE: tuple[Shape, ...] = _rows("", [
    (1, 128, 512, 8, "launch-bound"),
    (8, 128, 512, 8),
    (32, 128, 768, 12),
    (1, 512, 768, 12),
    (16, 512, 768, 12),
    (4, 1024, 1024, 16),
    (16, 1024, 1024, 16),
    (1, 2048, 2048, 16),
    (8, 2048, 1024, 16),
    (2, 4096, 1024, 16),
    (1, 4096, 2048, 32),
    (1, 8192, 1024, 16, "the longest rows the naive layer runs on a T4"),
    (2, 8192, 768, 12, "the longest rows the naive layer runs on a T4"),
    (1, 100_000, 1024, 16, "long context: naive infeasible"),
])

SMOKE_SUITE: tuple[Shape, ...] = _rows("s", [
    (1, 16, 32, 2, "tiny"),
    (3, 37, 48, 4, "odd batch, prime seq_len"),
    (2, 64, 96, 6, "head_dim 16"),
])

ALL_ROWS = {shape.row: shape for shape in SUITE + SMOKE_SUITE}


SHAPE_SPEC = re.compile(r"B(\d+)\s*N([\d_]+)\s*d(\d+)\s*H(\d+)", re.IGNORECASE)


def parse_shape(text: str) -> Shape:
    """A shape of one's own, written as the tables label one: "B4 N1000 d512 H8" (batch, sequence length,
    d_model, heads); its row label is that text. ValueError, naming the problem, for anything else."""
    match = SHAPE_SPEC.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a shape: {text!r}; write it as B<batch> N<seq_len> d<d_model> H<heads>, "
                         "e.g. B4 N1000 d512 H8")
    batch, seq_len, d_model, heads = (int(g.replace("_", "")) for g in match.groups())
    return Shape(shape_label(batch, seq_len, d_model, heads), batch, seq_len, d_model, heads, "your own shape")


def select_rows(spec: str | None, default: tuple[Shape, ...] = SUITE) -> list[Shape]:
    """Rows from a spec like "1-13", "1,6,9", "s1", "smoke", "suite", or shapes of one's own such as
    "B4 N1000 d512 H8" (see `parse_shape`), mixed freely; None gives `default`."""
    if spec is None:
        return list(default)
    named = {"suite": SUITE, "all": SUITE, "smoke": SMOKE_SUITE}
    rows: list[Shape] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        if part in named:
            rows += named[part]
        elif part in ALL_ROWS:
            rows.append(ALL_ROWS[part])
        elif part[:1] in "Bb":  # a shape of one's own, before ranges: "B1 N-4 d32 H2" is a bad shape, not a range
            rows.append(parse_shape(part))
        elif "-" in part:
            lo, hi = part.split("-", 1)
            if not (lo.isdigit() and hi.isdigit() and 1 <= int(lo) <= int(hi) <= len(SUITE)):
                raise ValueError(f"bad row range {part!r}: use e.g. '1-13' within 1-{len(SUITE)}")
            rows += SUITE[int(lo) - 1:int(hi)]
        else:
            raise ValueError(f"unknown row {part!r}{did_you_mean(part, [*named, *ALL_ROWS])}: "
                             f"known rows are 1-{len(SUITE)}, "
                             f"{', '.join(s.row for s in SMOKE_SUITE)}, 'suite' and 'smoke', or a shape of "
                             "your own such as 'B4 N1000 d512 H8'")
    return rows
