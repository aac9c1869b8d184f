"""The interactive controls of the walkthrough: a step's rows, dtype and variant, a long-context run's sizes,
and the widget that reruns a measurement when one of them changes."""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from ..core.lists import positive_ints as parse_sizes  # noqa: F401 (the chunk-size box reads as --chunk-sizes)
from .notebook import Context, dtype_choices


def _widgets():
    try:
        import ipywidgets
    except ImportError as exc:
        raise ImportError("the interactive controls need ipywidgets: pip install 'roofline_lib[notebooks]'") from exc
    return ipywidgets


def step_controls(ctx: Context, variants: Sequence[str], value: str | None = None) -> dict:
    """The standard controls of a step: rows (suite rows like "1,6,9", or a shape of one's own such as
    "B4 N1000 d512 H8", applied on Enter), dtype and variant."""
    widgets = _widgets()
    picks = ctx.rows[:1] if ctx.smoke else list(dict.fromkeys([ctx.rows[0], ctx.rows[-1]]))  # quick to rerun
    return {
        "rows": widgets.Text(value=",".join(s.row for s in picks), description="rows",
                             placeholder="e.g. 1,6,9 or 1-13 or B4 N1000 d512 H8",
                             continuous_update=False),
        "dtype": widgets.Dropdown(options=dtype_choices(ctx.device), value=ctx.dtype_name, description="dtype"),
        "variant": widgets.Dropdown(options=list(variants), value=value or variants[-1], description="variant"),
    }


def longctx_controls(seq_len: int, chunk_sizes: Sequence[int]) -> dict:
    """Controls of a long-context run: the sequence length and the chunk sizes, each applied on Enter."""
    widgets = _widgets()
    return {
        "seq_len": widgets.BoundedIntText(value=seq_len, min=1, max=10**8, description="seq_len",
                                          continuous_update=False),
        "chunk_sizes": widgets.Text(value=",".join(map(str, chunk_sizes)), description="chunk sizes",
                                    placeholder="e.g. 4096,16384", continuous_update=False),
    }


def rerun_widget(measure: Callable[..., object], opening: object = None, **controls) -> object:
    """Controls that rerun `measure(**values)` when one changes (text on Enter, never mid-edit) and show
    what it returns (a DataFrame, a Figure, or a tuple of them) in an output area below them.

    What the controls' opening values give is displayed now as plain output, before the controls, so a saved
    notebook (or one read where widgets do not render) still shows it: `opening`, a result already measured for
    them (the session ladder's lines, so that one measurement shows one value), else `measure` run now, where an
    error fails the cell.
    """
    from IPython.display import display

    widgets = _widgets()
    out = widgets.Output()

    def show(result: object) -> None:
        for item in result if isinstance(result, tuple) else (result,):
            display(item)

    def rerun(_change: object = None) -> None:
        with out:
            out.clear_output(wait=True)
            try:
                result = measure(**{name: c.value for name, c in controls.items()})
            except ValueError as exc:  # a bad rows spec or dtype: say so, keep the controls usable
                out.clear_output()
                print(f"error: {exc}")
                return
            show(result)

    show(measure(**{name: c.value for name, c in controls.items()}) if opening is None else opening)
    for control in controls.values():
        if hasattr(control, "continuous_update"):
            control.continuous_update = False
        control.observe(rerun, names="value")
    return _controls_box(widgets)([widgets.HBox(list(controls.values())), out])


@functools.cache
def _controls_box(widgets) -> type:
    """A VBox whose plain-text form, what a saved notebook shows where widgets do not render, says what the
    controls are and where they work, instead of their repr ("VBox(children=(HBox(…"). Made once, on first use,
    since ipywidgets is imported only then."""

    class ControlsBox(widgets.VBox):
        def __repr__(self) -> str:
            names = ", ".join(c.description for c in self.children[0].children)
            return (f"[controls: {names}. Change one (type, then press Enter) to run a new, separate measurement, "
                    "shown below the controls; they work where the notebook runs live, in Jupyter or Colab]")

        def _repr_mimebundle_(self, **kwargs) -> dict:
            return {**super()._repr_mimebundle_(**kwargs), "text/plain": repr(self)}  # whole, not clipped at 110

    return ControlsBox


def decode_controls(batch: int, context: int, shape: str) -> dict:
    """Controls of a decode step: the batch, the context (positions attended, the new token's included) and the
    layer's width and heads as "d1024 H16", each applied on Enter."""
    widgets = _widgets()
    return {
        "batch": widgets.BoundedIntText(value=batch, min=1, max=4096, description="batch", continuous_update=False),
        "context": widgets.BoundedIntText(value=context, min=2, max=10**7, description="context",
                                          continuous_update=False),
        "shape": widgets.Text(value=shape, description="shape", placeholder="e.g. d1024 H16",
                              continuous_update=False),
    }
