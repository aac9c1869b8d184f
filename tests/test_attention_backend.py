"""SDPA's backend chosen per shape by measurement, and forced backends still computing the layer's function.
The choice itself is checked on a fake clock (conftest's `fake_clock`): exact, however busy the machine."""
import pandas as pd
import pytest
import torch

from roofline_lib import SMOKE_SUITE, Case
from roofline_lib.variants.attention_backend import BACKENDS, SDPA_PICK, choose_backend
from roofline_lib.variants.fastest import FastestLayer
from roofline_lib.variants.sdpa import no_empty_mask, sdpa_attention


def fake_attend(clock, seconds: dict[str, float], refuses: dict[str, str]):
    """An attention call that takes `seconds[name]` of `clock` on each backend (SDPA_PICK for None) or refuses it."""
    def attend(backend):
        name = backend or SDPA_PICK
        if name in refuses:
            raise RuntimeError(refuses[name])
        clock.sleep(seconds[name])
    return attend


def test_a_backend_faster_than_sdpas_pick_is_forced(cpu, fake_clock):
    attend = fake_attend(fake_clock, {SDPA_PICK: 0.004, "flash": 0.001, "efficient": 0.008},
                         {"cudnn": "no cuDNN here\nmore"})
    choice = choose_backend(attend, cpu, budget_s=0.05)
    assert choice.backend == "flash" and choice.label == "flash"
    assert choice.unavailable == {"cudnn": "no cuDNN here"}
    assert set(choice.timings) == {SDPA_PICK, "flash", "efficient"}
    assert choice.versus_pick.verdict == "faster" and choice.versus_pick.speedup == pytest.approx(4.0)


@pytest.mark.parametrize("forced_s, verdict", [(0.004, "slower"), (0.002, "within noise")])
def test_sdpas_pick_is_kept_unless_beaten_beyond_noise(cpu, fake_clock, forced_s, verdict):
    attend = fake_attend(fake_clock, {SDPA_PICK: 0.002, "cudnn": forced_s, "flash": forced_s, "efficient": forced_s},
                         {})
    choice = choose_backend(attend, cpu, budget_s=0.05)
    assert choice.backend is None and choice.label == SDPA_PICK
    assert choice.versus_pick.verdict == verdict


def test_no_runnable_backend_keeps_sdpas_pick(cpu, fake_clock):
    choice = choose_backend(fake_attend(fake_clock, {SDPA_PICK: 0.0}, dict.fromkeys(BACKENDS, "no")), cpu,
                            budget_s=0.01)
    assert choice.backend is None and choice.versus_pick is None and set(choice.unavailable) == set(BACKENDS)


def test_real_sdpa_backends_on_the_cpu(cpu):
    q, k, v = torch.randn(3, 2, 4, 33, 16, dtype=torch.float64).unbind(0)  # each (B, H, N, hd)
    choice = choose_backend(lambda backend: sdpa_attention(q, k, v, None, backend=backend), cpu, budget_s=0.01)
    assert "cudnn" in choice.unavailable and all(choice.unavailable.values())
    assert set(choice.timings) == {SDPA_PICK} | (set(BACKENDS) - set(choice.unavailable))
    for backend in set(BACKENDS) - set(choice.unavailable):
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
    choice = choose_backend(lambda backend: sdpa_attention(q, k, v, None, backend=backend), cpu, budget_s=0.01)
    assert "switched off" in choice.unavailable["flash"] and "flash" not in choice.timings


def test_fastest_sets_the_chosen_backend_on_every_candidate(cpu):
    case = Case(SMOKE_SUITE[0], torch.float32, cpu, padding="holes")
    layer = FastestLayer({"a": no_empty_mask(case.layer), "b": no_empty_mask(case.layer)}, budget_s=0.03,
                         choose_attention=True)
    assert case.check_module("fastest", layer).passed
    (key,) = layer.attention
    backend = layer.attention[key].backend
    assert all(m.attention_backend == backend for m in layer.candidates.values())
    assert f"attention: {layer.attention[key].label}" in layer.detail


@pytest.mark.gpu
@pytest.mark.parametrize("backend", list(BACKENDS))
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
    assert list(results["option"]) == [SDPA_PICK, *BACKENDS] * 2
    refused = results[results["status"] == "skipped"]
    assert "cudnn" in set(refused["option"]) and refused["reason"].notna().all()
    assert (results.loc[results["status"] == "ok", "median_ms"] > 0).all()
    assert set(results["kept"]) <= {SDPA_PICK, *BACKENDS}
    assert "refused" in capsys.readouterr().out


def test_backend_summary_names_its_units_and_the_fastest_forced_backend():
    from roofline_lib.runs.backends import backend_summary
    base = {"row": "1", "shape": "B1 N128 d512 H8", "kept": "sdpa_pick", "kept_speedup": 0.246,
            "kept_verdict": "slower", "fastest_forced": "efficient"}
    records = [base | {"option": o, "status": "ok", "median_ms": ms, "tflops": 1.0}
               for o, ms in (("sdpa_pick", 0.0091), ("cudnn", 0.0517), ("flash", 0.0485), ("efficient", 0.0369))]
    table = backend_summary(pd.DataFrame(records))
    assert "sdpa_pick ms (TFLOP/s)" in table and table["fastest forced (speedup over pick)"][0] == "efficient 0.246× slower"
    old = backend_summary(pd.DataFrame(records).drop(columns="fastest_forced"))  # a record from before the column
    assert old["fastest forced (speedup over pick)"][0] == "0.246× slower"
