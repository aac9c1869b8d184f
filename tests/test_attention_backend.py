"""SDPA's backend chosen per shape by measurement, and forced backends still computing the layer's function."""
import numpy as np
import pandas as pd
import pytest
import torch

from roofline_lib import SMOKE_SUITE, Case
from roofline_lib.measure.timing import time_layer_calls
from roofline_lib.variants.attention_backend import SDPA_PICK, choose_backend
from roofline_lib.variants.fastest import FastestLayer
from roofline_lib.variants.sdpa import SDPA_BACKENDS, no_empty_mask, sdpa_attention


def fake_attend(ms: dict[str, float], refuses: dict[str, str]):
    """An attention call that refuses the backends in `refuses`; `fake_timer(ms)` says how long the others take."""
    def attend(backend):
        name = backend or SDPA_PICK
        if name in refuses:
            raise RuntimeError(refuses[name])
    return attend


def fake_timer(ms: dict[str, float]):
    """A timer (`attention_backend.Timer`) that reports `ms[name]` (SDPA_PICK for SDPA's pick) with 2 % noise,
    without running anything: the choice is tested apart from the machine's load."""
    rng = np.random.default_rng(0)

    def timer(fns, device, *, budget_s, min_reps, max_reps):
        return {name: ms[name] * (1 + 0.02 * rng.standard_normal(max_reps)) for name in fns}
    return timer


def test_a_backend_faster_than_sdpas_pick_is_forced(cpu):
    ms = {SDPA_PICK: 4.0, "flash": 1.0, "efficient": 8.0}
    choice = choose_backend(fake_attend(ms, {"cudnn": "no cuDNN here\nmore"}), cpu, fake_timer(ms), budget_s=0.05)
    assert choice.backend == "flash" and choice.label == "flash"
    assert choice.unavailable == {"cudnn": "no cuDNN here"}
    assert set(choice.timings) == {SDPA_PICK, "flash", "efficient"}
    assert choice.versus_pick.verdict == "faster"


def test_sdpas_pick_is_kept_unless_beaten_beyond_noise(cpu):
    ms = {SDPA_PICK: 1.0, "cudnn": 4.0, "flash": 4.0, "efficient": 4.0}
    choice = choose_backend(fake_attend(ms, {}), cpu, fake_timer(ms), budget_s=0.05)
    assert choice.backend is None and choice.label == SDPA_PICK
    assert choice.versus_pick.verdict == "slower"


def test_no_runnable_backend_keeps_sdpas_pick(cpu):
    ms = {SDPA_PICK: 1.0}
    choice = choose_backend(fake_attend(ms, dict.fromkeys(SDPA_BACKENDS, "no")), cpu, fake_timer(ms), budget_s=0.01)
    assert choice.backend is None and choice.versus_pick is None and set(choice.unavailable) == set(SDPA_BACKENDS)


def test_real_sdpa_backends_on_the_cpu(cpu):
    q, k, v = torch.randn(3, 2, 4, 33, 16, dtype=torch.float64).unbind(0)  # each (B, H, N, hd)
    choice = choose_backend(lambda backend: sdpa_attention(q, k, v, None, backend=backend), cpu,
                            time_layer_calls, budget_s=0.01)
    assert "cudnn" in choice.unavailable and all(choice.unavailable.values())
    assert set(choice.timings) == {SDPA_PICK} | (set(SDPA_BACKENDS) - set(choice.unavailable))
    for backend in set(SDPA_BACKENDS) - set(choice.unavailable):
        torch.testing.assert_close(sdpa_attention(q, k, v, None, backend=backend), sdpa_attention(q, k, v, None))


@pytest.fixture
def flash_off():
    was = torch.backends.cuda.flash_sdp_enabled()
    torch.backends.cuda.enable_flash_sdp(False)
    yield
    torch.backends.cuda.enable_flash_sdp(was)


def test_a_switched_off_backend_is_refused_not_forced(cpu, flash_off):
    q, k, v = torch.randn(3, 1, 2, 8, 16).unbind(0)  # each (B, H, N, hd)
    with pytest.raises(RuntimeError, match="flash backend is switched off"):
        sdpa_attention(q, k, v, None, backend="flash")
    choice = choose_backend(lambda backend: sdpa_attention(q, k, v, None, backend=backend), cpu,
                            time_layer_calls, budget_s=0.01)
    assert "switched off" in choice.unavailable["flash"] and "flash" not in choice.timings


def test_fastest_sets_the_chosen_backend_on_every_candidate(cpu):
    case = Case(SMOKE_SUITE[0], torch.float32, cpu, padding="holes")
    layer = FastestLayer({"a": no_empty_mask(case.layer), "b": no_empty_mask(case.layer)}, time_layer_calls,
                         budget_s=0.03, choose_attention=True)
    assert case.check_module("fastest", layer).passed
    (key,) = layer.attention
    backend = layer.attention[key].backend
    assert all(m.attention_backend == backend for m in layer.candidates.values())
    assert f"attention: {layer.attention[key].label}" in layer.detail


@pytest.mark.gpu
@pytest.mark.parametrize("backend", list(SDPA_BACKENDS))
@pytest.mark.parametrize("padding", ["none", "holes"])
def test_gpu_forced_backends_pass(backend, padding):
    case = Case(SMOKE_SUITE[1], torch.float16, torch.device("cuda"), padding=padding)
    layer = no_empty_mask(case.layer)
    layer.attention_backend = backend
    try:
        result = case.check_module(backend, layer)
    except RuntimeError as exc:
        pytest.skip(f"{backend} refuses these inputs: {str(exc).splitlines()[0]}")
    assert result.passed, result.reason


def test_backend_benchmark_writes_every_option_per_row(tmp_path, capsys):
    import pandas as pd

    from benchmarks.attention_backends import main
    assert main(["--device", "cpu", "--rows", "s1,s2", "--budget", "0.01", "--out", str(tmp_path)]) == 0
    results = pd.read_csv(next(tmp_path.glob("attention_backends_*.csv")))
    assert list(results["option"]) == [SDPA_PICK, *SDPA_BACKENDS] * 2
    refused = results[results["status"] == "skipped"]
    assert "cudnn" in set(refused["option"]) and refused["reason"].notna().all()
    assert (results.loc[results["status"] == "ok", "median_ms"] > 0).all()
    assert set(results["kept"]) <= {SDPA_PICK, *SDPA_BACKENDS}
    assert "refused" in capsys.readouterr().out


def test_backend_summary_names_its_units_and_the_fastest_forced_backend():
    from roofline_lib.runs.backends import backend_summary
    base = {"row": "1", "shape": "B1 N128 d512 H8", "kept": "sdpa_pick", "kept_speedup": 0.246,
            "kept_verdict": "slower", "fastest_forced": "efficient"}
    records = [base | {"option": o, "status": "ok", "median_ms": ms, "tflops": 1.0}
               for o, ms in (("sdpa_pick", 0.0091), ("cudnn", 0.0517), ("flash", 0.0485), ("efficient", 0.0369))]
    table = backend_summary(pd.DataFrame(records))
    assert "sdpa_pick ms (TFLOP/s)" in table
    assert table["fastest forced (speedup over pick)"][0] == "efficient 0.246× slower"
    old = backend_summary(pd.DataFrame(records).drop(columns="fastest_forced"))  # a record from before the column
    assert old["fastest forced (speedup over pick)"][0] == "0.246× slower"
