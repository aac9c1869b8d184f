"""The launch-bound measure: a stack of layers with distinct weights, kernels per layer, latency, GPU time."""
import math

import pandas as pd
import pytest
import torch

from roofline_lib import SMOKE_SUITE, Case
from roofline_lib.runs.stack import (
    Stack,
    build_stack,
    kernel_and_gap_us,
    launch_bound_table,
    stack_choices,
    unstackable_reason,
)


def test_a_stack_applies_distinct_layers_in_turn(cpu):
    shape = SMOKE_SUITE[0]
    stack = build_stack("no_empty_mask", shape, torch.float64, cpu, layers=3)
    first, second = stack.layers[0], stack.layers[1]
    assert not torch.equal(first.qkv_proj.weight, second.qkv_proj.weight)  # distinct weights
    x = Case(shape, torch.float64, cpu).x
    want = x
    for layer in stack.layers:
        want = layer(want)
    assert torch.equal(stack(x), want)


class Chooser(torch.nn.Module):
    """A layer that chose `name` on every shape, as `fastest` reports it."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def choice_on(self, x, key_padding_mask=None):
        return self.name, ""


def test_a_stack_whose_layers_chose_otherwise_says_what_they_chose():
    x = torch.zeros(1, 2, 4)
    assert stack_choices(Stack([Chooser("a"), Chooser("a")]), Chooser("a"), x) == ""
    said = stack_choices(Stack([Chooser("a"), Chooser("residual_addmm")]), Chooser("graph_residual_addmm"), x)
    assert said == "; its graphed stack's layers chose a, residual_addmm, and its GPU µs are theirs"
    assert stack_choices(Stack([torch.nn.Identity()]), torch.nn.Identity(), x) == ""  # a rung chooses nothing


def test_launch_bound_table_on_the_cpu_says_what_it_cannot_measure(cpu):
    table = launch_bound_table(SMOKE_SUITE[:1], ["reference", "no_empty_mask", "triton_ln"], torch.float32, cpu,
                               layers=2, budget_s=0.0, show_progress=False).set_index("variant")
    assert table.loc["no_empty_mask", "kernels_per_layer"] < table.loc["reference", "kernels_per_layer"]
    assert (table.latency_us.dropna() > 0).all() and table.gpu_us_per_layer.isna().all()
    assert "CUDA graph" in table.loc["no_empty_mask", "reason"]
    assert {"device", "torch", "dtype", "date"} <= set(table.columns)
    fast = launch_bound_table(SMOKE_SUITE[:1], ["fastest"], torch.float32, cpu, layers=2, budget_s=0.0,
                              show_progress=False).iloc[0]
    assert "→" in fast.detail and "not timed" not in fast.detail  # the choice per row; what it never times apart
    assert fast.not_timed.startswith("not timed here: ")


@pytest.mark.gpu
def test_graphed_stack_gpu_time_per_layer():
    table = launch_bound_table(SMOKE_SUITE[:1], ["no_empty_mask"], torch.float16, torch.device("cuda"), layers=4,
                               budget_s=0.05, show_progress=False)
    assert table.status.eq("ok").all() and (table.gpu_us_per_layer > 0).all()
    assert (table.kernel_us_per_layer > 0).all() and (table.gap_us_per_layer >= 0).all()


def test_kernel_and_gap_us_split_a_timeline_into_busy_and_idle_time():
    timeline = pd.DataFrame({"start_us": [0.0, 1.0, 6.0, 9.0], "end_us": [4.0, 3.0, 8.0, 10.0]})
    previous_end = timeline.end_us.cummax().shift(1).fillna(0.0)  # as `profiling.kernel_timeline` computes it
    timeline["gap_before_us"] = (timeline.start_us - previous_end).clip(lower=0.0)
    assert kernel_and_gap_us(timeline) == (7.0, 3.0)  # busy 0-4, 6-8, 9-10; idle 4-6, 8-9
    assert all(map(math.isnan, kernel_and_gap_us(timeline.iloc[:0])))


def test_the_benchmark_writes_its_table(tmp_path, capsys):
    from benchmarks.launch_bound import main
    assert main(["--device", "cpu", "--rows", "s1", "--variants", "no_empty_mask,whole_layer", "--layers", "2",
                 "--budget", "0", "--out", str(tmp_path)]) == 0
    assert list(tmp_path.glob("launch_bound_*.csv")) and "kernels_per_layer" in capsys.readouterr().out
    table = pd.read_csv(next(tmp_path.glob("launch_bound_*.csv")))
    whole = table[table.variant == "whole_layer"].iloc[0]  # no contender without a GPU, and it says so
    assert whole.status == "skipped" and "no contender" in whole.reason
    assert main(["--device", "cpu", "--layers", "0", "--out", str(tmp_path)]) == 2


def test_a_rung_that_cannot_be_stacked_says_why_in_one_line():
    nested = RuntimeError("Cannot prepare for replay during capturing stage. during CUDA graph capture.\nmore")
    assert unstackable_reason(nested, 8).startswith("one layer called 8× back to back (same weights) instead of a "
                                                    "stack, since it replays a CUDA graph of its own, and a graph "
                                                    "cannot be captured inside another; its kernel count includes "
                                                    "the input copy and the output clone")
    assert unstackable_reason(nested, 8).endswith("its kernel and gap µs are not split, as one call's trace counts "
                                                  "the host's launches between kernels as gaps")
    eager = unstackable_reason(nested, 8, chosen="residual_addmm")  # fastest's one layer chose apart from the stack's
    assert "the stack's layers replay CUDA graphs of their own" in eager and "chose residual_addmm, eager" in eager
    assert "input copy" not in eager and "input copy" in unstackable_reason(nested, 8, chosen="graph_residual_addmm")
    other = unstackable_reason(RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be ..."), 4)
    assert "since CUDA error: out of memory;" in other and "\n" not in other


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["triton_ln", "residual_addmm", "fused_gemm"])
def test_triton_rungs_with_programmatic_dependent_launch_pass_and_stack(name, monkeypatch):
    from roofline_lib.kernels.launch import PDL_SWITCH
    from roofline_lib.runs.pipeline import check_variant
    monkeypatch.setenv(PDL_SWITCH, "1")
    cuda = torch.device("cuda")
    for padding in ("none", "left", "holes"):
        result = check_variant(Case(SMOKE_SUITE[0], torch.float16, cuda, padding, seed=3), name)
        assert result.passed, (padding, result.reason)
    table = launch_bound_table(SMOKE_SUITE[:1], [name], torch.float16, cuda, layers=4, budget_s=0.05,
                               show_progress=False)
    assert table.status.eq("ok").all() and (table.triton_launch == "programmatic dependent launch").all()
