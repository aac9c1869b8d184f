"""The whole layer as one persistent kernel (roofline_lib.kernels.whole_layer, variants.whole_layer) against §3,
and its benchmark (benchmarks/layer_megakernel.py). Without a GPU its phases run one launch each through the
Triton interpreter (conftest.py); the persistent launch, with its grid barriers, needs a GPU."""
import dataclasses
from functools import partial

import pandas as pd
import pytest
import torch

pytest.importorskip("triton")

from conftest import CUDA, DEVICE  # noqa: E402

from benchmarks import layer_megakernel as lm  # noqa: E402
from roofline_lib import SMOKE_SUITE, SUITE, Case  # noqa: E402
from roofline_lib.kernels.whole_layer import MAX_UNROLLED, PHASE_NAMES, WholeLayerConfig, default_config  # noqa: E402
from roofline_lib.runs import stack  # noqa: E402
from roofline_lib.variants.whole_layer import WholeLayer  # noqa: E402

pytestmark = pytest.mark.skipif(not CUDA and not lm.INTERPRETED, reason="needs a GPU or TRITON_INTERPRET=1")


SLOW = pytest.mark.slow  # the interpreter's seconds-long cases: CI runs them with the slow ones
SMOKE_CASES = ([(SMOKE_SUITE[0], padding) for padding in ("none", "left", "holes")]
               + [pytest.param(SMOKE_SUITE[1], padding, marks=SLOW) for padding in ("none", "left")]
               + [(SMOKE_SUITE[1], "holes")]  # the hardest padding on s2 stays in the quick suite
               + [pytest.param(SMOKE_SUITE[2], "holes", marks=SLOW)])  # s3, the interpreter's slowest


@pytest.mark.parametrize(("shape", "padding"), SMOKE_CASES, ids=lambda v: getattr(v, "row", v))
def test_phases_pass_section_3_with_padding(shape, padding):
    case = Case(shape, torch.float16, DEVICE, padding)
    result = case.check_module("whole_layer_phases", WholeLayer(case.layer, phases=True))
    assert result.passed, result.reason


@pytest.mark.slow
@pytest.mark.parametrize("split", [2, 3])
def test_fc2_split_into_partial_sums_passes_section_3(split):
    case = Case(SMOKE_SUITE[1], torch.float16, DEVICE, "holes")
    layer = WholeLayer(case.layer, dataclasses.replace(default_config(), split=split), phases=True)
    result = case.check_module("whole_layer", layer)
    assert result.passed, result.reason


def test_a_layer_that_ignores_the_padding_fails_left_padding():
    """The check can fail: the same kernel told there is no padding is wrong once padding comes first."""
    case = Case(SMOKE_SUITE[0], torch.float16, DEVICE, "left")
    layer = WholeLayer(case.layer, phases=True)
    assert not case.check_module("blind", lambda x, key_padding_mask=None: layer(x)).passed


def test_bad_inputs_are_refused_in_one_line():
    case = Case(SMOKE_SUITE[0], torch.float16, DEVICE)
    layer = WholeLayer(case.layer)
    with pytest.raises(ValueError, match="d_model"):
        layer(case.x[..., :-1])
    with pytest.raises(ValueError, match="the split 1 to 16"):
        WholeLayerConfig(split=0)


def test_a_configuration_the_gpu_cannot_hold_is_one_line_naming_it():
    from triton.runtime.errors import OutOfResources

    from roofline_lib.kernels.launch import fitting
    with pytest.raises(ValueError, match=r"^configuration 16x32x128/4u does not fit this GPU: [^\n.]*shared memory"):
        with fitting("16x32x128/4u"):
            raise OutOfResources(263168, 232448, "shared memory")


@pytest.mark.slow
def test_the_experiment_writes_its_tables_on_the_cpu(tmp_path, capsys, monkeypatch):
    """The tables' structure, not their times: each layer is timed in the fewest rounds (the interpreter takes
    over a second per whole-layer call)."""
    if CUDA:
        pytest.skip("the CPU path")
    monkeypatch.setattr(stack, "time_layer_calls", partial(stack.time_layer_calls, min_reps=1, max_reps=1, warmup=0))
    assert lm.main(["--device", "cpu", "--rows", "s1", "--budget", "0", "--configs", "16x16x16/2/w2s1",
                    "--out", str(tmp_path)]) == 0
    written = sorted(path.name for path in tmp_path.iterdir())
    assert len(written) == 2 and any(name.endswith("_checks.csv") for name in written)
    assert "6 of 6 checks pass" in capsys.readouterr().out  # fp16 only: see CHECK_DTYPES
    times = pd.read_csv(next(path for path in tmp_path.iterdir() if not path.name.endswith("_checks.csv")))
    experiments = times[~times.variant.isin(lm.BASELINES)]
    assert set(experiments.variant) == {*lm.FACTORIES, "whole_layer 16x16x16/2/w2s1"}
    assert experiments.passed.all() and experiments.err_ratio.between(0, 1).all()  # each checked, then timed


GPU_SHAPES = [SUITE[0], SUITE[3], SMOKE_SUITE[1]]  # rows 1 and 4; s2 (head_dim 12) leaves most programs idle


def agrees_with_its_phases(case: Case, **options) -> None:
    """§3, the same output on every call (no race), bit for bit the phases' (the same tiles in the same order),
    and every barrier complete (the count's low bits back at 0). `options`: WholeLayerConfig's."""
    config = WholeLayerConfig(**options)
    layer = WholeLayer(case.layer, config)
    result = case.check_module("whole_layer", layer)
    assert result.passed, result.reason
    once, twice = layer(case.x, case.key_padding_mask), layer(case.x, case.key_padding_mask)
    torch.testing.assert_close(twice, once, rtol=0, atol=0)
    phases = WholeLayer(case.layer, config, phases=True)
    torch.testing.assert_close(once, phases(case.x, case.key_padding_mask), rtol=0, atol=0)
    assert layer.sync.item() & 0x7FFFFFFF == 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("padding", ["none", "left", "holes"])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: s.row)
def test_the_persistent_kernel_passes_section_3_and_matches_its_phases(shape, padding, dtype):
    agrees_with_its_phases(Case(shape, dtype, DEVICE, padding))


@pytest.mark.gpu
def test_the_persistent_kernel_without_a_split_fc2():
    """fc2 adds its bias and residual itself: five phases, four barriers."""
    agrees_with_its_phases(Case(SUITE[0], torch.float16, DEVICE, "holes"), split=1)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_the_persistent_kernel_with_its_loops_unrolled(dtype):
    """The default (the best row-1 tiles), and unrolled with one stage (with three, unrolled, it needs more shared
    memory than an H200 has), with holes in the padding."""
    case = Case(SUITE[0], dtype, DEVICE, "holes")
    agrees_with_its_phases(case)
    agrees_with_its_phases(case, unroll=True, stages=1)


@pytest.mark.gpu
def test_graph_replays_of_the_persistent_kernel_agree():
    """Its barrier count is never reset: every replay must still wait at every barrier and give the same."""
    case = Case(SUITE[0], torch.float16, DEVICE)
    layer = WholeLayer(case.layer)
    want = layer(case.x)
    static = case.x.clone()
    layer(static)  # warm-up off the capture: compilation
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = layer(static)
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert layer.sync.item() & 0x7FFFFFFF == 0


@pytest.mark.gpu
def test_each_phase_and_the_persistent_kernel_are_timed():
    (record,) = lm.phase_times(SUITE[0], torch.float16, DEVICE, ["32x32x64/2/w4s3"])[1:]
    assert record["config"] == "32x32x64/2/w4s3"
    assert all(record[name] > 0 for name in PHASE_NAMES) and record["persistent"] > 0
    assert record["sum_of_phases"] == pytest.approx(sum(record[name] for name in PHASE_NAMES))


def test_a_configuration_that_fails_is_recorded_and_the_run_goes_on(monkeypatch):
    def launch_bound_row(shape, names, *args, **kwargs):
        if names[0].startswith(lm.CONFIGURED):
            raise RuntimeError("too many blocks in cooperative launch\nsecond line")
        return [{"variant": names[0], "latency_us": 1.0}]

    monkeypatch.setattr(lm, "launch_bound_row", launch_bound_row)
    records = lm.timings(SMOKE_SUITE[0], torch.float16, DEVICE, 0.01, ["32x64x128/4/w8s3/p2"])
    failed = records[-1]
    assert failed["variant"] == "whole_layer 32x64x128/4/w8s3/p2" and failed["passed"] is False
    assert failed["reason"] == "too many blocks in cooperative launch"
    assert [r["latency_us"] for r in records[:-1]] == [1.0] * (len(lm.BASELINES) + len(lm.FACTORIES))
    assert all(r["passed"] for r in records[len(lm.BASELINES):-1])  # each experiment layer checked first
    monkeypatch.setattr(lm, "launch_bound_row", lambda *args, **kwargs: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # a baseline's failure is no configuration's: it ends the run
        lm.timings(SMOKE_SUITE[0], torch.float16, DEVICE, 0.01)


def test_other_tiles_are_parsed_or_refused_in_one_line():
    assert WholeLayerConfig.parse("64x32x16/8") == WholeLayerConfig(64, 32, 16, 8)
    assert WholeLayerConfig.parse("64x32x16/8/w8s3u/p2/r128") == WholeLayerConfig(64, 32, 16, 8, 8, 3, True, 2, 128)
    assert WholeLayerConfig.parse("64x32x16/8/r96").maxnreg == 96
    for config in (WholeLayerConfig(), WholeLayerConfig(16, 16, 16, 1, 2, 1, True, 3, 64)):
        assert WholeLayerConfig.parse(config.label) == config  # the label reads back
    with pytest.raises(ValueError, match=f"48 steps of 16, more than {MAX_UNROLLED}"):
        WholeLayerConfig(block_k=16, split=8, unroll=True).check_unrollable(768, 3072)  # d_model 768, steps of 16
    WholeLayerConfig(block_k=64, split=4, unroll=True).check_unrollable(768, 3072)  # 12 steps over d_model, d_ff/4
    with pytest.raises(ValueError, match="40 steps of 64"):
        WholeLayerConfig(block_k=64, split=4, unroll=True).check_unrollable(768, 10240)  # a d_ff not 4·d_model
    WholeLayerConfig(block_k=16, split=8).check_unrollable(768, 3072)  # rolled loops take any length
    with pytest.raises(ValueError, match="LayerNorm statistics takes 64 steps of 16, .*take a smaller BLOCK_M"):
        WholeLayerConfig(block_m=256, unroll=True).check_unrollable(1024, 4096)  # 4,096 elements: 16 columns a step
    for bad in ("64x32/4", "64x48x16/4", "64x32x16/0", "8x32x16/2", "nonsense", "64x32x16/8/w3s2",
                "64x32x16/8/w4s0", "64x32x16/8/w4", "64x32x16/8u", "64x32x16/8/p5", "64x32x16/8/r16",
                "64x32x16/8/r96/p2", "64x32x16/8/r0"):
        with pytest.raises(ValueError):
            WholeLayerConfig.parse(bad)
    for bad in (dict(stages=None), dict(per_sm=1.5), dict(warps=8.0), dict(unroll=1)):
        with pytest.raises(ValueError, match="integers"):
            WholeLayerConfig(**bad)
    assert lm.main(["--device", "cpu", "--configs", "64x48x16/4", "--out", "unused"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("config", ["32x16x16/2", "32x16x16/5/w4s1u"])
def test_other_tiles_pass_section_3(config):
    """Other tiles; and the K loops unrolled, with fc2's K (192) in five slices of 48: the last one past K."""
    case = Case(SMOKE_SUITE[1], torch.float16, DEVICE, "left")
    layer = lm.configured(config)(case.layer)
    assert layer.config == WholeLayerConfig.parse(config)
    result = case.check_module(f"whole_layer {config}", layer)
    assert result.passed, result.reason
