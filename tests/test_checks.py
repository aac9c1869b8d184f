"""The shared input checks: a clear one-line error for every bad value."""
import pytest

from roofline_lib.core.checks import check_positive_int, parse_lengths


def test_parse_lengths_reads_comma_separated_integers():
    assert parse_lengths("100000,1000000", "--seq-lens") == [100_000, 1_000_000]
    assert parse_lengths(" 96 , 1_024", "--seq-lens", minimum=2) == [96, 1024]


@pytest.mark.parametrize("text, message", [
    ("100k", "--seq-lens takes comma-separated integers, got '100k'"),
    ("96,", "--seq-lens takes comma-separated integers, got ''"),
    ("96,1", "--seq-lens: every sequence length must be at least 2, got 1"),
])
def test_parse_lengths_names_the_option_and_the_bad_item(text, message):
    with pytest.raises(ValueError) as caught:
        parse_lengths(text, "--seq-lens", minimum=2)
    assert str(caught.value) == message


@pytest.mark.parametrize("value", [0, -3, 2.0, "4", True])
def test_check_positive_int_refuses_what_is_not_a_positive_int(value):
    with pytest.raises(ValueError, match="must be a positive integer"):
        check_positive_int("n_heads", value)


@pytest.mark.parametrize("module", ["streamed_truth", "context_parallel_overhead", "context_parallel_scaling"])
def test_every_benchmark_taking_seq_lens_refuses_a_bad_one_in_one_line(module, tmp_path, capsys):
    main = __import__(f"benchmarks.{module}", fromlist=["main"]).main
    assert main(["--out", str(tmp_path), "--device", "cpu", "--seq-lens", "1M"]) == 2
    assert capsys.readouterr().err == "error: --seq-lens takes comma-separated integers, got '1M'\n"
    assert not any(tmp_path.iterdir())  # nothing written
