"""One rung of the session's ladder sweep as notebooks 02 and 03 show it: against the rung before it, every speedup with
its band, no NaN in a table, the memory a call needs and the empty mask's size (present.report, present.prose)."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from roofline_lib.core.decision import decide
from roofline_lib.present import prose, report
from roofline_lib.present.formatting import percent, three_digits, with_band

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NAN = float("nan")


def ladder(vs=((1.5, 1.4, 1.6), (2.0, 1.9, 2.1)), gpu_share=(0.5, 0.99), peak=(10.0, 20.0), status="ok"):
    """A two-row ladder sweep of three rungs as `session.ladder_sweep` returns it: each rung against the one before."""
    records = []
    for i, row in enumerate(["1", "2"]):
        shape = dict(row=row, shape=f"B2 N{64 * (i + 1)} d32 H2", batch=2, seq_len=64 * (i + 1), device="GPU X",
                     dtype="fp16", reason="")
        records.append(shape | dict(variant="reference", status="ok", passed=True, err_ratio=1.0, median_ms=4.0,
                                    against=NAN, gpu_share=0.99, peak_extra_mib=4 * peak[i]))
        records.append(shape | dict(variant="sdpa_fused_qkv", status="ok", passed=True, err_ratio=1.0, median_ms=2.0,
                                    speedup=2.0, speedup_p20=1.9, speedup_p80=2.1, against="reference",
                                    vs_speedup=2.0, vs_p20=1.9, vs_p80=2.1, vs_verdict="faster", gpu_share=0.99,
                                    peak_extra_mib=2 * peak[i]))
        s, p20, p80 = vs[i]
        records.append(shape | dict(variant="no_empty_mask", status=status, passed=True, err_ratio=1.01,
                                    median_ms=2.0 / s, speedup=4.0 / (2.0 / s), speedup_p20=3.0, speedup_p80=5.0,
                                    against="sdpa_fused_qkv", vs_speedup=s, vs_p20=p20, vs_p80=p80,
                                    vs_verdict="faster" if p20 > 1 else "slower" if p80 < 1 else "within noise",
                                    gpu_share=gpu_share[i], peak_extra_mib=peak[i]))
    return pd.DataFrame.from_records(records)


def test_a_ladder_step_is_the_comparison_with_the_rung_before():
    step = report.ladder_step(ladder(), "no_empty_mask")
    assert step.baseline.tolist() == ["sdpa_fused_qkv"] * 2 and step.baseline_ms.tolist() == [2.0, 2.0]
    assert step.speedup.tolist() == [1.5, 2.0] and step.ref_speedup.tolist() == [3.0, 4.0]
    assert step.gpu_share.tolist() == [0.5, 0.99]  # the lower of the two rungs'
    with pytest.raises(ValueError, match="no rows for 'fastest'"):
        report.ladder_step(ladder(), "fastest")


def test_a_step_table_writes_every_speedup_with_its_band_and_no_nan():
    table = report.step_table(ladder(), "no_empty_mask")
    assert table["× sdpa_fused_qkv"].tolist() == ["1.50× [1.40–1.60]", "2.00× [1.90–2.10]"]
    assert table["× reference"].tolist() == ["3.00× [3.00–5.00]", "4.00× [3.00–5.00]"]
    assert "note" not in table and not table.isna().any().any() and not table.astype(str).eq("nan").any().any()
    first = report.step_table(ladder(), "sdpa_fused_qkv")
    assert "× reference" in first and list(first.columns).count("× reference") == 1  # the rung before is the reference
    skipped = ladder(status="skipped").assign(reason="needs a GPU")
    table = report.step_table(skipped.assign(median_ms=np.where(skipped.variant == "no_empty_mask", NAN,
                                                                skipped.median_ms)), "no_empty_mask")
    assert table["no_empty_mask per call"].tolist() == ["skipped"] * 2 and table.note.tolist() == ["needs a GPU"] * 2


def test_the_step_headline_is_the_geometric_mean_with_its_band_and_the_rows_with_theirs():
    text = prose.step_headline(ladder(), "no_empty_mask")
    assert text.startswith("On this GPU X in fp16, **no_empty_mask** is 1.73× [1.63–1.83] as fast as "
                           "**sdpa_fused_qkv** (the geometric mean over 2 rows)")
    assert "from 1.50× [1.40–1.60] on row 1 (B2 N64 d32 H2) to 2.00× [1.90–2.10] on row 2" in text
    assert "faster beyond noise on 2 of 2 rows, and §3 passed on every row." in text
    one = prose.step_headline(ladder()[lambda t: t.row == "1"], "no_empty_mask")
    assert "1.50× [1.40–1.60] as fast as **sdpa_fused_qkv** on row 1 (B2 N64 d32 H2): faster" in one



def test_a_band_edge_just_off_1_is_printed_with_the_digits_that_tell_it_from_1():
    assert with_band(1.24, 1.004, 1.29) == "1.24× [1.004–1.29]"  # "faster": the band lies above 1, and reads so
    assert with_band(1.01, 1.0001, 1.03) == "1.01× [1.0001–1.03]"
    assert with_band(0.99, 0.98, 0.9996) == "0.990× [0.980–0.9996]"
    assert with_band(1.0, 1.0, 1.0) == "1.00× [1.00–1.00]"  # exactly 1: nothing to tell apart
    assert with_band(1.0024, 1.0021, 1.0032) == "1.002× [1.002–1.003]"  # the ratio as its edges, not "1.00×"
    assert with_band(0.9997, 0.9996, 0.9998) == "0.9997× [0.9996–0.9998]"


def test_a_speedup_is_printed_with_its_band_in_three_digits():
    assert with_band(1.5, 1.4, 1.6) == "1.50× [1.40–1.60]" and with_band(NAN, NAN, NAN) == ""
    assert with_band(1.5, NAN, NAN) == "1.50×"  # no band measured: the ratio alone
    assert with_band(1.6712, 1.59, 1.6702) == "1.67× [1.59–1.67]"  # three digits, whatever the edges


def test_the_speedup_table_and_the_summary_print_a_speedup_with_its_band():
    data = ladder(vs=((1.7, 1.6, 1.8), (2.0, 1.9, 2.1)))
    data.loc[(data.variant == "no_empty_mask") & (data.row == "1"), ["speedup", "speedup_p20", "speedup_p80"]] = (
        3.2, 3.0, 3.5)
    cells = report.speedup_table(data.assign(status="ok")).set_index("row")["no_empty_mask (× reference)"]
    assert cells["1"] == "1.18 ms, 3.20× [3.00–3.50]" and cells["2"] == "1.00 ms, 4.00× [3.00–5.00]"
    quick = report.speedup_table(data.assign(status="ok", median_ms=0.221))
    assert quick.columns.name is None
    assert quick.set_index("row")["no_empty_mask (× reference)"]["2"].startswith("221 µs, ")
    from roofline_lib.present.notebook import speedup_view
    table, fig = speedup_view(data.assign(status="ok"))  # the Try-it widgets' pair: this table and its bars
    assert table.equals(report.speedup_table(data.assign(status="ok"))) and fig.axes


def test_the_step_decision_names_noise_and_host_bound_rows():
    text = prose.step_decision(ladder(vs=((1.5, 1.4, 1.6), (0.99, 0.9, 1.1))), "no_empty_mask")
    assert text.startswith("Against sdpa_fused_qkv: faster on row 1; within noise on row 2.")
    assert "On row 1 the GPU idles for more than 10% of a call (GPU share 50.0% on row 1, the lower" in text
    assert "→ **keep**" in text
    slower = prose.step_decision(ladder(vs=((0.8, 0.7, 0.9), (0.9, 0.85, 0.95))), "no_empty_mask")
    assert "slower on rows 1, 2" in slower and "→ **revert**" in slower


def untimed_rung() -> pd.DataFrame:
    """The ladder with `no_empty_mask` skipped on both rows, as a sweep records it: no time, no rung compared."""
    data = ladder().astype({"passed": object})
    mine = data.variant == "no_empty_mask"
    data.loc[mine, ["status", "reason"]] = ["skipped", "no_empty_mask: needs a GPU"]
    data.loc[mine, ["median_ms", "against", "vs_speedup", "vs_p20", "vs_p80", "vs_verdict", "passed"]] = NAN
    return data


def test_a_rung_timed_on_no_row_decides_nothing_and_names_the_rung_the_ladder_goes_on_from():
    data = untimed_rung()
    assert report.ladder_step(data, "no_empty_mask").baseline.tolist() == ["sdpa_fused_qkv"] * 2
    text = prose.step_decision(data, "no_empty_mask")
    assert text == ("→ **nothing decided**: no row of **no_empty_mask** was timed against **sdpa_fused_qkv**, so the "
                    "ladder goes on from **sdpa_fused_qkv**.")
    assert "the rung before" not in text
    headline = prose.step_headline(data, "no_empty_mask")
    assert headline == ("**no_empty_mask** was not timed against **sdpa_fused_qkv** on this GPU X in fp16: rows 1, 2 "
                        "skipped (needs a GPU).")  # one reason, said once, without the name it repeats


def test_the_step_decision_names_each_rows_rung_before_where_they_differ():
    data = ladder()
    data.loc[(data.variant == "no_empty_mask") & (data.row == "2"), "against"] = "reference"  # sdpa ran on row 1 only
    text = prose.step_decision(data, "no_empty_mask")
    assert text.startswith("Against sdpa_fused_qkv on row 1, reference on row 2: faster on rows 1, 2.")
    assert "the rung before" not in text


def test_the_step_decision_shows_the_call_it_is_given():
    data = ladder()
    failed = decide(report.ladder_step(data, "no_empty_mask"), kernel_ok=False, candidate="no_empty_mask",
                    baseline="sdpa_fused_qkv")
    text = prose.step_decision(data, "no_empty_mask", failed)
    assert "→ **revert**: the fused kernel failed its correctness check" in text and "→ **keep**" not in text
    assert text.endswith(prose.decision_markdown(failed))
    with pytest.raises(ValueError, match="decides 'triton_ln', not 'no_empty_mask'"):
        prose.step_decision(data, "no_empty_mask", decide(pd.DataFrame()))


def test_the_memory_table_and_sentence_and_the_empty_masks_size():
    data = ladder()
    table = report.memory_table(data, ["reference", "sdpa_fused_qkv", "no_empty_mask"], mask=True)
    assert table["sdpa_fused_qkv MiB"].tolist() == ["20.0", "40.0"]
    assert table["the mask MiB"].tolist() == [three_digits(2 * 64**2 * 3 / 2**20),
                                              three_digits(2 * 128**2 * 3 / 2**20)]
    text = prose.memory_summary(data, "sdpa_fused_qkv", "no_empty_mask", mask=True)
    assert text.startswith("**no_empty_mask**'s peak memory per call, beyond what was already held, is 50.0% of "
                           "**sdpa_fused_qkv**'s on row 1.")
    assert "The most it saves is 20.0 MiB, on row 2 (40.0 → 20.0 MiB)." in text and "fp16, is 0.0938 MiB" in text
    cpu = data.assign(peak_extra_mib=NAN)
    assert report.memory_table(cpu, ["reference"]).empty
    assert "no count of a call's memory on the CPU" in prose.memory_summary(cpu, "reference", "sdpa_fused_qkv")


def test_02_points_to_a_memory_section_that_03_has():
    assert "section *Memory without the mask*" in (NOTEBOOKS / "02_sdpa_fused_qkv.py").read_text()
    assert "\n# ## Memory without the mask\n" in (NOTEBOOKS / "03_mask_elimination.py").read_text()


def test_the_rung_before_passes_over_a_rung_timed_nowhere():
    data = untimed_rung()
    assert report.rung_before(data, "sdpa_fused_qkv") == "reference" and report.rung_before(data, "reference") == ""
    data = pd.concat([data, data[data.variant == "reference"].assign(variant="fastest")])
    assert report.rung_before(data, "fastest") == "sdpa_fused_qkv"  # no_empty_mask ran on no row


def test_a_share_reads_as_a_percentage_of_three_digits():
    assert [percent(s) for s in (0.5111, 0.0145, 0.0009, 1.0)] == ["51.1%", "1.45%", "0.0900%", "100%"]


def test_a_lines_speedup_reads_over_the_reference_or_the_rung_before_inside_its_band():
    from roofline_lib.present.formatting import line_speedup
    line = {"speedup": 2.0, "speedup_p20": 1.9, "speedup_p80": 2.1, "vs_speedup": 1.65, "vs_p20": 1.6, "vs_p80": 1.7}
    assert line_speedup(line) == "2.00× [1.90–2.10]"
    assert line_speedup(line, against=True) == "1.65× [1.60–1.70]"
