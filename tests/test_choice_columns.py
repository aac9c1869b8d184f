"""What a layer chose, as typed columns of the sweep (`chosen`, `attention_backend`), read from the layer's
attributes; and no module of `present` reads the free-text `detail` back."""
from pathlib import Path

import torch

from roofline_lib import SMOKE_SUITE, Case, run_sweep
from roofline_lib.measure.timing import time_layer_calls
from roofline_lib.runs.pipeline import CHOICE_COLUMNS, choices
from roofline_lib.variants.attention_backend import SDPA_PICK
from roofline_lib.variants.fastest import FastestLayer
from roofline_lib.variants.sdpa import no_empty_mask

PRESENT = Path(__file__).resolve().parents[1] / "roofline_lib" / "present"


def test_the_sweep_records_what_each_layer_chose_in_its_own_columns(cpu):
    df = run_sweep(SMOKE_SUITE[:1], ["reference", "no_empty_mask", "fastest"], torch.float32, cpu, budget_s=0.0,
                   show_progress=False)
    by = df.set_index("variant")
    assert set(CHOICE_COLUMNS) <= set(df.columns)
    assert by.loc["fastest", "chosen"] == "no_empty_mask"  # on a CPU its one candidate: chosen untimed
    assert by.loc["fastest", "attention_backend"] == by.loc["no_empty_mask", "attention_backend"] == SDPA_PICK
    assert by.loc["reference", "chosen"] == by.loc["reference", "attention_backend"] == ""  # no choice, no SDPA
    assert by.loc["no_empty_mask", "chosen"] == ""


def test_a_forced_backend_and_a_candidate_without_sdpa_are_recorded_as_such(cpu):
    case = Case(SMOKE_SUITE[0], torch.float32, cpu)
    forced = no_empty_mask(case.layer)
    forced.attention_backend = "flash"
    assert choices(forced, case) == {"chosen": "", "attention_backend": "flash"}
    plain = FastestLayer({"reference": case.layer}, time_layer_calls)  # a candidate that runs no SDPA
    assert plain.choice_on(case.x) == ("", "")  # not called on this shape yet
    plain(case.x)
    assert choices(plain, case) == {"chosen": "reference", "attention_backend": ""}


def test_fastest_reports_the_backend_it_measured_for_the_shape(cpu):
    case = Case(SMOKE_SUITE[0], torch.float32, cpu)
    layer = FastestLayer({"a": no_empty_mask(case.layer), "b": no_empty_mask(case.layer)}, time_layer_calls,
                         budget_s=0.02,
                         choose_attention=True)
    layer(case.x)
    (key,) = layer.attention
    chosen, backend = layer.choice_on(case.x)
    assert chosen == layer.chosen[key] and backend == layer.attention[key].label  # whichever the timing kept
    assert layer.choice_on(case.x, torch.ones(case.x.shape[:2], dtype=torch.bool)) == ("", "")  # padded: unseen


def test_nothing_in_present_reads_the_free_text_detail_back():
    for path in PRESENT.glob("*.py"):
        text = path.read_text()
        assert ".detail" not in text and '"detail"' not in text, path.name
