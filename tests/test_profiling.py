"""The profiler tables on CPU: categories sum to the total, the category rule, the before/after diff finds
the removed mask ops, the CUDA path on hand-made kernel events, the suite tables and the CLI."""
import os
import subprocess
import sys
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from torch.autograd import DeviceType

import roofline_lib.core.reference as reference
from roofline_lib import SMOKE_SUITE
from roofline_lib.cli import main
from roofline_lib.measure import profiler
from roofline_lib.measure.profile_analysis import diff_profiles, mask_share_table
from roofline_lib.measure.profile_events import Profile
from roofline_lib.measure.profile_rules import CATEGORIES, MASK_CATEGORIES, categorize, charge_category
from roofline_lib.runs.profile_suite import profile_suite, profile_variant

SHAPE = SMOKE_SUITE[1]
STEPS = {"wait": 0, "warmup": 1, "active": 2}


@pytest.fixture(scope="module")
def profiles():
    cpu = torch.device("cpu")
    return {name: profile_variant(name, SHAPE, torch.float32, cpu, **STEPS)
            for name in ("reference", "sdpa_fused_qkv", "no_empty_mask")}


def test_category_rule():
    assert categorize("aten::addmm") == "GEMM" and categorize("aten::_softmax") == "softmax"
    assert categorize("aten::native_layer_norm") == "LayerNorm" and categorize("aten::nonexistent_op") == "other"
    assert categorize("sm90_xmma_gemm_f16f16_f16f32") == "GEMM"
    assert categorize("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>") == "attention core"
    assert categorize("void at::native::elementwise_kernel<direct_copy_kernel_cuda>") == "copy/layout"
    # the project's own Triton kernels: LayerNorm + GEMM + epilogue is a GEMM; the whole layer in one launch is its own
    assert categorize("_fused_linear_kernel") == "GEMM" and categorize("_add_layer_norm_fwd_kernel") == "LayerNorm"
    assert categorize("_gemv_kernel") == "GEMM"  # fused_linear's one-row path is a GEMM too
    assert categorize("_layer_kernel") == categorize("_decode_layer_kernel") == "whole-layer kernel"
    # the clone inside masked_fill is masking; the clone inside matmul belongs to attention
    assert charge_category(["aten::copy_", "aten::clone", "aten::masked_fill"]) == "masking"
    assert charge_category(["aten::copy_", "aten::clone", "aten::reshape", "aten::matmul"]) == "attention core"
    assert charge_category(["aten::fill_", "aten::ones"]) == "mask construction"
    assert charge_category(["aten::where", "aten::scaled_dot_product_attention"]) == "masking"
    assert charge_category(["aten::copy_", "aten::reshape"]) == "copy/layout"
    assert charge_category([], "_add_layer_norm_fwd_kernel") == "LayerNorm"  # a Triton kernel outside any op


def test_cpu_profile_tables(profiles):
    ref = profiles["reference"]
    assert ref.device_type == "cpu" and ref.steps == STEPS["active"] and ref.kernels.empty
    assert list(ref.categories.category) == list(CATEGORIES)
    assert ref.categories.time_us.sum() == pytest.approx(ref.ops.time_us.sum())
    assert ref.categories.share.sum() == pytest.approx(1.0) and ref.ops.share.sum() == pytest.approx(1.0)
    assert ref.total_us > 0 and ref.step_us >= ref.total_us * 0.5
    calls = ref.ops.groupby("op").calls.sum()
    assert calls["aten::masked_fill"] == 2 and calls["aten::softmax"] == 1 and calls["aten::addmm"] == 6
    masking = ref.ops[ref.ops.category == "masking"]
    assert {"aten::masked_fill", "aten::masked_fill_"} <= set(masking.op)
    assert ref.share(*MASK_CATEGORIES) > 0 and profiles["no_empty_mask"].share(*MASK_CATEGORIES) == 0
    with pytest.raises(ValueError, match="unknown categories"):
        ref.share("masks")


def test_diff_finds_removed_mask_ops(profiles):
    first = diff_profiles(profiles["reference"], profiles["sdpa_fused_qkv"]).set_index("op")
    assert first.loc["aten::masked_fill", "change"] == "removed"
    assert first.loc["aten::_softmax", "change"] == "removed"
    assert first.loc["aten::scaled_dot_product_attention", "change"] == "added"
    assert first.loc["aten::masked_fill", "delta_us"] == pytest.approx(-first.loc["aten::masked_fill", "before_us"])
    second = diff_profiles(profiles["sdpa_fused_qkv"], profiles["no_empty_mask"]).set_index("op")
    assert {second.loc[op, "change"] for op in ("aten::ones", "aten::arange", "aten::__and__")} == {"removed"}
    assert second.loc["aten::addmm", "change"] == "in both" and second.loc["aten::addmm", "calls_after"] == 4
    by_category = diff_profiles(profiles["sdpa_fused_qkv"], profiles["no_empty_mask"], by="category")
    assert by_category.set_index("category").loc["mask construction", "change"] == "removed"
    with pytest.raises(ValueError, match="no GPU kernels"):
        diff_profiles(profiles["reference"], profiles["no_empty_mask"], by="kernel")
    with pytest.raises(ValueError, match="by must be"):
        diff_profiles(profiles["reference"], profiles["no_empty_mask"], by="line")


Kernel = namedtuple("Kernel", ["name", "device", "duration"])


def _event(name, parent=None, kernels=(), self_cpu=1.0):
    return SimpleNamespace(name=name, cpu_parent=parent, kernels=list(kernels), device_type=DeviceType.CPU,
                           is_async=False, self_cpu_time_total=self_cpu, cpu_time_total=10.0)


def test_cuda_path_on_hand_made_events():
    """Kernel times are charged through the op that launched them, and kernels outside any op by name."""
    events = []
    for _ in range(2):  # two recorded steps
        step = _event("ProfilerStep#1", kernels=[Kernel("_add_layer_norm_fwd_kernel", 0, 3.0)])
        masked_fill = _event("aten::masked_fill", step)
        clone = _event("aten::clone", masked_fill)
        events += [step, _event("aten::linear", step), masked_fill, clone,
                   _event("aten::copy_", clone, [Kernel("direct_copy_kernel", 0, 5.0)]),
                   _event("aten::masked_fill_", masked_fill, [Kernel("masked_fill_kernel", 0, 7.0)]),
                   _event("aten::addmm", _event("aten::linear", step), [Kernel("nvjet_hsh_gemm", 0, 20.0)]),
                   _event("cudaLaunchKernel", step)]
        gpu_twin = _event("ProfilerStep#1")  # the profiler's GPU-side record of the same step
        gpu_twin.device_type = DeviceType.CUDA
        events.append(gpu_twin)
    p = Profile.from_events(events, "cuda")
    assert p.steps == 2 and p.total_us == pytest.approx(35.0)
    for name, us in [("direct_copy_kernel", 5.0), ("masked_fill_kernel", 7.0), ("nvjet_hsh_gemm", 20.0),
                     ("_add_layer_norm_fwd_kernel", 3.0)] * 2:  # every kernel is also a GPU-side event
        events.append(_gpu_event(name, us))
    assert Profile.from_events(events, "cuda").total_us == pytest.approx(35.0)  # each counted once
    kernels = p.kernels.set_index("kernel")
    assert kernels.loc["direct_copy_kernel", "category"] == "masking"  # the clone inside masked_fill
    assert kernels.loc["nvjet_hsh_gemm", "category"] == "GEMM" and kernels.loc["nvjet_hsh_gemm", "calls"] == 1
    assert kernels.loc["_add_layer_norm_fwd_kernel", "category"] == "LayerNorm"
    cats = p.categories.set_index("category").time_us
    assert cats["masking"] == pytest.approx(12.0) and cats["GEMM"] == pytest.approx(20.0)
    assert p.ops.time_us.sum() == pytest.approx(p.kernels.time_us.sum())
    assert "(launched outside any op)" in set(p.ops.op) and "cudaLaunchKernel" not in set(p.ops.op)


def _gpu_event(name, us):
    return SimpleNamespace(name=name, device_type=DeviceType.CUDA, is_async=False, is_user_annotation=False,
                           time_range=SimpleNamespace(start=100.0, end=100.0 + us))


def test_a_kernel_no_op_claims_is_counted_by_its_name():
    """A Triton kernel launched from Python outside any aten op is attached to no CPU event: it still counts."""
    step = _event("ProfilerStep#1")
    events = [step, _event("aten::addmm", step, [Kernel("nvjet_hsh_gemm", 0, 20.0)]),
              _gpu_event("nvjet_hsh_gemm", 20.0), _gpu_event("_add_layer_norm_fwd_kernel", 4.0)]
    p = Profile.from_events(events, "cuda")
    assert p.total_us == pytest.approx(24.0)
    assert p.kernels.set_index("kernel").loc["_add_layer_norm_fwd_kernel", "category"] == "LayerNorm"
    assert p.ops.set_index("op").loc["(launched outside any op)", "time_us"] == pytest.approx(4.0)


def test_suite_tables_and_mask_share(cpu, monkeypatch):
    big = SMOKE_SUITE[1]
    monkeypatch.setattr(reference, "reference_fits", lambda s, d, dev: (s.batch, s.seq_len) != (big.batch, big.seq_len))
    rows = [SMOKE_SUITE[0], SMOKE_SUITE[1]]
    suite = profile_suite(rows, ["reference", "no_empty_mask"], torch.float32, cpu, show_progress=False, **STEPS)
    runs = suite.runs.set_index(["row", "variant"])
    assert runs.loc[("s2", "reference"), "status"] == "infeasible"
    assert runs.loc[("s1", "reference"), "status"] == "ok" and runs.loc[("s1", "reference"), "steps"] == 2
    for frame in (suite.ops, suite.categories, suite.runs):
        assert {"row", "variant", "device", "torch", "triton", "dtype", "date"} <= set(frame.columns)
    assert len(suite.categories) == 3 * len(CATEGORIES)
    shares = mask_share_table(suite.categories).set_index(["row", "variant"])
    assert shares.loc[("s1", "reference"), "mask_share"] > 0
    assert shares.loc[("s1", "no_empty_mask"), "mask_share"] == 0
    ref = shares.loc[("s1", "reference")]
    assert ref.mask_ms == pytest.approx(ref.mask_construction_ms + ref.masking_ms)
    assert (shares.dtype == "fp32").all()


def test_bad_schedule_is_rejected(cpu):
    with pytest.raises(ValueError, match="active"):
        profile_variant("reference", SHAPE, torch.float32, cpu, active=0)


def test_cli_profile_smoke(tmp_path, capsys):
    rc = main(["profile", "--rows", "s1", "--device", "cpu", "--variants", "reference,sdpa_fused_qkv",
               "--wait", "0", "--warmup", "1", "--active", "1", "--out", str(tmp_path / "r"),
               "--figures", str(tmp_path / "f")])
    assert rc == 0
    names = sorted(p.name for p in (tmp_path / "r").iterdir())
    assert [n.rsplit("_", 1)[-1] for n in names if not n.endswith("mask_share.csv")] == \
        ["categories.csv", "ops.csv", "runs.csv"]
    shares = pd.read_csv(next((tmp_path / "r").glob("*_mask_share.csv")))
    assert set(shares.variant) == {"reference", "sdpa_fused_qkv"} and shares.mask_share.between(0, 1).all()
    assert {p.name.rsplit("_", 1)[-1] for p in (tmp_path / "f").iterdir()} == {"breakdown.png", "share.png"}
    assert "building and applying masks" in capsys.readouterr().out


def test_kernel_timeline_lays_one_call_on_a_time_axis_and_writes_the_trace(cpu, tmp_path):
    import json

    from roofline_lib import Case
    from roofline_lib.measure.profiler import kernel_timeline
    from roofline_lib.present.plots_profile import plot_timeline
    case = Case(SMOKE_SUITE[1], torch.float32, cpu)
    timeline = kernel_timeline(case.layer, case.x, trace=str(tmp_path / "trace.json"))
    assert {"aten::layer_norm", "aten::masked_fill", "aten::softmax"} <= set(timeline.name)
    assert timeline.start_us.iloc[0] == 0 and timeline.start_us.is_monotonic_increasing
    assert (timeline.duration_us >= 0).all() and (timeline.gap_before_us >= 0).all()
    assert set(timeline.category) <= set(CATEGORIES) and "masking" in set(timeline.category)
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert plot_timeline(timeline).axes
    lo, hi = plot_timeline(timeline, axis_us=1e6).axes[0].get_xlim()  # a shared axis, for comparing
    assert lo < 0 < float(timeline.end_us.max()) < hi and hi == pytest.approx(1e6, rel=0.01)


def test_launch_table_sets_host_time_against_kernel_time(cpu):
    from roofline_lib.measure.profile_analysis import launch_table
    suite = profile_suite(SMOKE_SUITE[:2], ["reference", "no_empty_mask"], torch.float32, cpu, show_progress=False,
                          **STEPS)
    table = launch_table(suite.runs)
    assert list(table.columns) == ["row", "shape", "variant", "call_us", "kernel_us", "busy", "idle_us",
                                   "waits_on_host"]
    assert (table.kernel_us <= table.call_us).all() and table.busy.between(0, 1).all()


def test_a_profile_names_what_ran_for_attention(profiles):
    ran = profiles["reference"].ran()  # most time first: on a CPU, bmm or the layout copies feeding it
    assert "aten::bmm" in ran[:2] and "aten::softmax" not in ran
    assert "scaled_dot_product" in profiles["no_empty_mask"].ran()[0]
    assert profiles["no_empty_mask"].ran("masking") == []


def test_a_profile_asks_for_cupti_to_be_detached_when_it_stops(cpu, monkeypatch):
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    profiler.leave_no_cupti_behind()
    assert os.environ["TEARDOWN_CUPTI"] == "1"
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")  # a user's own choice stands
    profiler.leave_no_cupti_behind()
    assert os.environ["TEARDOWN_CUPTI"] == "0"
    monkeypatch.delenv("TEARDOWN_CUPTI")
    monkeypatch.setattr(torch.version, "cuda", "12.4")  # too old: a graph after a teardown could crash
    profiler.leave_no_cupti_behind()
    assert "TEARDOWN_CUPTI" not in os.environ


@pytest.mark.slow  # a fresh interpreter: kineto reads its log level once per process
def test_a_profile_prints_none_of_the_profilers_own_log_lines_and_a_users_level_stands(tmp_path, monkeypatch):
    """Kineto prints "USDT: … profiler_start" and the like to the process's stderr, where a notebook shows them
    under the cell; it reads its level once, at the process's first profile: hence a fresh interpreter."""
    script = ("import torch\n"
              "from roofline_lib import SMOKE_SUITE\n"
              "from roofline_lib.core.correctness import Case\n"
              "from roofline_lib.measure.profiler import kernel_timeline, profile_layer\n"
              "case = Case(SMOKE_SUITE[0], torch.float32, torch.device('cpu'))\n"
              "profile_layer(case.layer, case.x)\n"
              "kernel_timeline(case.layer, case.x)\n"
              "print('profiled')\n")
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert ran.returncode == 0 and ran.stdout.strip() == "profiled", ran.stderr
    assert not [line for line in ran.stderr.splitlines() if line.startswith(("USDT:", "STAGE:", "INFO:"))], ran.stderr
    monkeypatch.setenv("KINETO_LOG_LEVEL", "2")  # a user's own choice stands
    profiler.quiet_profiler()
    assert os.environ["KINETO_LOG_LEVEL"] == "2"


@pytest.mark.gpu
def test_a_gpu_profile_of_triton_ln_counts_its_triton_kernel():
    """The fused add + LayerNorm kernel is launched from Python, outside any aten op: the profile still has it,
    and its time is in the total."""
    from roofline_lib.core.shapes import Shape
    from roofline_lib.runs.profile_suite import profile_variant

    p = profile_variant("triton_ln", Shape("", 2, 128, 256, 4), torch.float16, torch.device("cuda"))
    triton = p.kernels[p.kernels.kernel.str.contains("add_layer_norm")]
    assert len(triton) and (triton.category == "LayerNorm").all() and triton.time_us.sum() > 0
    ops = p.ops.set_index("op")
    assert ops.loc["(launched outside any op)", "time_us"].sum() >= triton.time_us.sum() * 0.999  # in the op table
