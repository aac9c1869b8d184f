"""Bad input gets a clear error naming the problem."""
import pytest
import torch

from roofline_lib import SMOKE_SUITE, VARIANTS, Case, ReferenceLayer, Shape, build_variant, select_rows, select_variants
from roofline_lib.core.catalog import ATTENTION_STRATEGIES, LADDER
from roofline_lib.core.catalog import PEERS as PEER_NAMES
from roofline_lib.core.device import resolve_device, resolve_dtype
from roofline_lib.runs.pipeline import prepare

LAYERS = ["reference", "sdpa_fused_qkv", "no_empty_mask"]


@pytest.fixture(params=LAYERS)
def layer(request):
    return build_variant(request.param, ReferenceLayer(32, 4))


def test_heads_must_divide_d_model():
    with pytest.raises(ValueError, match="not divisible by n_heads"):
        ReferenceLayer(30, 4)


@pytest.mark.parametrize("bad, match", [
    (torch.randn(8, 32), "3-D"),
    (torch.randn(1, 2, 8, 32), "3-D"),
    (torch.randn(1, 8, 31), "last dimension is 31"),
])
def test_bad_x_shape(layer, bad, match):
    with pytest.raises(ValueError, match=match):
        layer(bad)


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("shape", [(0, 8, 32), (2, 0, 32)])
def test_every_layer_refuses_an_empty_batch_or_sequence_in_one_line(name, shape):
    layer = build_variant(name, ReferenceLayer(32, 4))  # the Triton rungs through the interpreter on a CPU
    with pytest.raises(ValueError, match=r"^x holds no tokens") as refused:
        layer(torch.randn(*shape))
    assert "\n" not in str(refused.value)


def test_dtype_mismatch(layer):
    with pytest.raises(TypeError, match="float64 but the layer's weights are torch.float32"):
        layer(torch.randn(1, 8, 32, dtype=torch.float64))


def test_device_mismatch(layer):
    class FakeMeta:  # a tensor on another device, without needing a GPU
        pass
    with pytest.raises(ValueError, match="is on meta but the layer is on cpu"):
        layer(torch.empty(1, 8, 32, device="meta"))


@pytest.mark.parametrize("mask, error, match", [
    (torch.ones(1, 8, dtype=torch.int64), TypeError, "bool tensor"),
    (torch.ones(1, 7, dtype=torch.bool), ValueError, r"shape \(batch, seq_len\) = \(1, 8\)"),
    (torch.ones(8, dtype=torch.bool), ValueError, "shape"),
    ([True] * 8, TypeError, "bool tensor"),
])
def test_bad_mask(layer, mask, error, match):
    with pytest.raises(error, match=match):
        layer(torch.randn(1, 8, 32), mask)


def test_unknown_names():
    with pytest.raises(ValueError, match="unknown variant 'fastest_ever'.*known variants are reference"):
        select_variants("reference,fastest_ever")
    with pytest.raises(ValueError, match="unknown variant"):
        build_variant("nope", ReferenceLayer(32, 4))
    with pytest.raises(ValueError, match="unknown row '15'"):
        select_rows("1,15")
    with pytest.raises(ValueError, match="bad row range"):
        select_rows("3-20")


def test_row_selection():
    assert [s.row for s in select_rows("1-3,s2")] == ["1", "2", "3", "s2"]
    assert len(select_rows("suite")) == 14 and select_rows(None)[0].seq_len == 128


def test_dtype_and_device_resolution(monkeypatch):
    cpu = torch.device("cpu")
    assert resolve_dtype(None, cpu) == torch.float32
    assert resolve_dtype("fp64", cpu) == torch.float64
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        resolve_dtype("int8", cpu)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(None).type == "cpu"
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_device("cuda")


def test_bf16_on_an_old_gpu_says_use_fp16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    with pytest.raises(ValueError, match=r"bf16 needs .*compute capability ≥ 8.0.*Tesla T4 is 7.5.*fp16"):
        resolve_dtype("bf16", torch.device("cuda"))


@pytest.mark.parametrize("bad", [4.0, "4", None, True, 0, -2])
def test_constructor_arguments_must_be_positive_integers(bad):
    with pytest.raises(ValueError, match="n_heads must be a positive integer"):
        ReferenceLayer(32, bad)
    with pytest.raises(ValueError, match="d_model must be a positive integer"):
        ReferenceLayer(bad, 4)
    if bad is not None:  # d_ff=None means 4·d_model
        with pytest.raises(ValueError, match="d_ff must be a positive integer"):
            ReferenceLayer(32, 4, d_ff=bad)
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        Shape("x", bad, 8, 32, 4)


@pytest.mark.parametrize("name", LADDER)
def test_every_rung_takes_a_reference_with_another_d_ff(name):
    """d_ff is the reference's to choose: a rung built on d_ff = 3·d_model computes that layer, not a 4·d_model one."""
    case = Case(SMOKE_SUITE[1], torch.float32, torch.device("cpu"), "left")
    case.layer = ReferenceLayer(case.shape.d_model, case.shape.n_heads, d_ff=3 * case.shape.d_model)
    torch.manual_seed(0)
    for p in case.layer.parameters():
        p.data.normal_(0, 0.2)
    done = prepare(case, name)
    assert done.status in ("ok", "skipped"), done.reason
    assert done.status == "ok" or "Triton" in done.reason


@pytest.mark.parametrize("wrong, reason", [
    (lambda x: x[:, :1], "returned a (3, 1, 48) torch.float32 tensor"),
    (lambda x: (x, x), "returned tuple, not a tensor"),
    (lambda x: x.double(), "torch.float64 tensor"),
])
def test_a_module_with_the_wrong_output_fails_the_check_with_the_reason(wrong, reason):
    case = Case(SMOKE_SUITE[1], torch.float32, torch.device("cpu"))
    result = case.check_module("wrong", lambda x, key_padding_mask=None: wrong(x))
    assert not result.passed and reason in result.reason
    assert prepare(case, "wrong", lambda ref: lambda x, key_padding_mask=None: wrong(x)).status == "fail"


@pytest.mark.parametrize("spec, match", [
    ("", "no variant named"), (" , ", "no variant named"), ("no_empty_mask,no_empty_mask", "more than once"),
    ("nope", "unknown variant"),
])
def test_malformed_variant_specs(spec, match):
    with pytest.raises(ValueError, match=match):
        select_variants(spec)


@pytest.mark.parametrize("name", ["", "reference,no_empty_mask", None, 3])
def test_build_variant_takes_exactly_one_name(name):
    with pytest.raises(ValueError, match="variant"):
        build_variant(name, ReferenceLayer(32, 4))


def test_the_catalog_names_what_the_code_has():
    from roofline_lib.variants.chunk_attention import STRATEGIES
    from roofline_lib.variants.peers import PEERS
    assert tuple(VARIANTS) == LADDER and tuple(PEERS) == PEER_NAMES
    assert tuple(STRATEGIES) == ATTENTION_STRATEGIES


def test_a_shape_of_ones_own_is_written_as_the_tables_label_it():
    mine = select_rows("1, B4 N1000 d512 H8")[1]
    assert (mine.batch, mine.seq_len, mine.d_model, mine.n_heads, mine.row) == (4, 1000, 512, 8, "B4 N1000 d512 H8")
    assert select_rows("b2 n100_000 d64 h4")[0].seq_len == 100_000


@pytest.mark.parametrize("spec, match", [
    ("B4 N1000 d510 H8", "not divisible by n_heads"), ("B0 N10 d8 H2", "batch must be a positive integer"),
    ("B4 N10 d8", "write it as B<batch> N<seq_len>"), ("Bx", "not a shape"),
    ("B1 N-4 d32 H2", "not a shape"),  # its hyphen made it read as a row range
])
def test_a_bad_shape_of_ones_own_says_what_is_wrong(spec, match):
    with pytest.raises(ValueError, match=match):
        select_rows(spec)


@pytest.mark.gpu
def test_t4_emulation_changes_the_librarys_choices_not_the_code_triton_builds():
    from roofline_lib.core import device as dev
    from roofline_lib.kernels.add_layer_norm import add_layer_norm_fwd
    cuda = torch.device("cuda")
    flash, cudnn = torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.cudnn_sdp_enabled()
    try:
        dev.emulate_t4(cuda)
        with pytest.raises(ValueError, match="bf16 needs a GPU"):
            dev.resolve_dtype("bf16", cuda)
        assert torch.cuda.get_device_capability(cuda) != dev.T4_CAPABILITY  # torch (and Triton) see the real GPU
        x = torch.randn(64, 256, device=cuda, dtype=torch.float16)
        w, b = torch.ones(256, device=cuda, dtype=torch.float16), torch.zeros(256, device=cuda, dtype=torch.float16)
        add_layer_norm_fwd(x, x, w, b, 1e-5)  # a Triton kernel still compiles and runs for this GPU
    finally:
        dev._emulated_capability = None
        dev._emulated_gib.clear()
        dev.set_memory_cap(cuda, None)
        torch.backends.cuda.enable_flash_sdp(flash)
        torch.backends.cuda.enable_cudnn_sdp(cudnn)


def test_an_emulated_t4_is_named_and_counted_as_one_on_the_gpu_it_runs_on(emulated_t4, monkeypatch):
    from roofline_lib.core import device as dev
    from roofline_lib.measure.ceilings import datasheet_spec
    name = "T4 (emulated on NVIDIA H100 80GB HBM3)"
    assert dev.device_name(emulated_t4) == name and dev.environment(emulated_t4, torch.float16)["device"] == name
    assert dev.multiprocessor_count(emulated_t4) == dev.T4_MULTIPROCESSORS == 40  # the H100's 132 not shown or used
    assert dev.timed_on(name) == "NVIDIA H100 80GB HBM3" and dev.timed_on("Tesla T4") == "Tesla T4"
    assert datasheet_spec(name).name.startswith("H100")  # the speeds measured are the H100's
    with pytest.raises(ValueError, match=r"bf16 needs .*T4 \(emulated on NVIDIA H100 80GB HBM3\) is 7.5"):
        dev.resolve_dtype("bf16", emulated_t4)
    assert not dev.emulating(torch.device("cpu")) and dev.multiprocessor_count(torch.device("cpu")) == 1
    monkeypatch.setattr(dev, "_emulated_capability", None)
    assert dev.device_name(emulated_t4) == "NVIDIA H100 80GB HBM3" and dev.multiprocessor_count(emulated_t4) == 132


def test_t4_emulation_keeps_its_memory_through_caps_and_lifts(monkeypatch):
    """A run that caps and later lifts its cap (the long-context runs do) must still see a T4's 14.7 GiB
    under emulation, not the real card's memory: checked on a simulated 140 GiB GPU."""
    from types import SimpleNamespace

    from roofline_lib.core import device as dev
    set_fractions = []
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=140 * 2**30))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, i: set_fractions.append(f))
    for switch in ("enable_flash_sdp", "enable_cudnn_sdp"):
        monkeypatch.setattr(torch.backends.cuda, switch, lambda on: None)
    monkeypatch.setattr(dev, "_fractions", {})
    monkeypatch.setattr(dev, "_emulated_gib", {})
    monkeypatch.setattr(dev, "_emulated_capability", None)
    cuda = torch.device("cuda", 0)
    dev.set_memory_cap(cuda, None)
    assert dev.memory_capacity(cuda) == 140 * 2**30  # no emulation: the whole card
    assert dev.emulated_memory_gib(cuda) is None and not dev.small_gpu(cuda)
    dev.emulate_t4(cuda)
    assert dev.emulated_memory_gib(cuda) == dev.T4_MEMORY_GIB  # what a run records as its cap where it sets none
    assert dev.small_gpu(cuda) and not dev.small_gpu(torch.device("cpu"))  # the notebooks' T4 rule follows it
    t4 = int(dev.T4_MEMORY_GIB * 2**30)  # 14.7 GiB is not a whole number of bytes: memory_capacity rounds down
    assert dev.memory_capacity(cuda) == t4
    dev.set_memory_cap(cuda, 40)  # a cap above the emulated card is no cap
    assert dev.memory_capacity(cuda) == t4
    dev.set_memory_cap(cuda, 5)
    assert dev.memory_capacity(cuda) == 5 * 2**30
    dev.set_memory_cap(cuda, None)  # lifting returns to the emulated card
    assert dev.memory_capacity(cuda) == t4
    assert set_fractions[-1] == pytest.approx(t4 / (140 * 2**30))


def test_an_option_is_never_read_as_an_abbreviation_of_a_longer_one():
    from roofline_lib.cli.parser import build_parser
    with pytest.raises(SystemExit):  # --budg would have been taken as --budget (and --context as --context-parallel)
        build_parser().parse_args(["run", "--budg", "0.1"])
