"""A sweep split over several GPUs: rows dealt evenly and deterministically, shares merged in suite order."""
import pandas as pd
import pytest

from roofline_lib import SUITE
from roofline_lib.cli import main
from roofline_lib.cli.parser import build_parser
from roofline_lib.cli.run import _shard_args
from roofline_lib.measure.roofline import layer_flops
from roofline_lib.runs.shards import merge_shards, split_rows


def cost(shard):
    return sum(1 + layer_flops(s) / 1e12 for s in shard)


@pytest.mark.parametrize("n", [1, 2, 4, 8, 20])
def test_every_row_lands_on_exactly_one_shard_in_suite_order(n):
    shards = split_rows(SUITE[:13], n)
    assert len(shards) == min(n, 13)
    rows = [s.row for shard in shards for s in shard]
    assert sorted(rows, key=int) == [s.row for s in SUITE[:13]]
    for shard in shards:
        assert [s.row for s in shard] == sorted((s.row for s in shard), key=int)
    assert split_rows(SUITE[:13], n) == shards  # deterministic: --resume gives each GPU the same rows


def test_shards_carry_about_equal_work():
    loads = [cost(shard) for shard in split_rows(SUITE[:13], 4)]
    heaviest = max(cost([s]) for s in SUITE[:13])
    assert max(loads) - min(loads) <= heaviest


def test_no_shards_is_refused():
    with pytest.raises(ValueError, match="at least one shard"):
        split_rows(SUITE, 0)


def _share(folder, rows, device="NVIDIA H200"):
    folder.mkdir(parents=True)
    pd.DataFrame({"row": rows, "variant": "reference", "median_ms": 1.0, "device": device, "torch": "t",
                  "triton": "tr", "dtype": "fp16"}).to_csv(folder / "run_gpu_fp16_today.csv", index=False)
    return folder


def test_merge_stacks_the_shares_in_suite_order(tmp_path):
    folders = [_share(tmp_path / "gpu0", ["2", "13"]), _share(tmp_path / "gpu1", ["1", "10"])]
    merged = merge_shards(folders, SUITE)
    assert list(merged.row) == ["1", "2", "10", "13"]


def test_merge_names_a_shard_that_left_nothing(tmp_path):
    folders = [_share(tmp_path / "gpu0", ["1"]), tmp_path / "gpu1"]
    (tmp_path / "gpu1").mkdir()
    with pytest.raises(ValueError, match=r"1 shard\(s\) left no results; see .*gpu1/log.txt"):
        merge_shards(folders, SUITE)


def test_merge_refuses_shares_from_different_gpus(tmp_path):
    folders = [_share(tmp_path / "gpu0", ["1"]), _share(tmp_path / "gpu1", ["2"], device="Tesla T4")]
    with pytest.raises(ValueError, match="differ in device"):
        merge_shards(folders, SUITE)


def test_each_share_runs_the_same_sweep():
    args = build_parser().parse_args(["run", "--gpus", "2", "--variants", "reference,fastest", "--budget", "0.5",
                                      "--against", "fastest", "--resume", "--rows", "1-4", "--out", "x"])
    child = _shard_args(args, ["reference", "fastest"])
    assert child == ["--seed", "0", "--variants", "reference,fastest", "--padding", "none", "--budget", "0.5",
                     "--against", "fastest", "--resume"]


def test_gpus_on_the_cpu_is_refused(capsys, tmp_path):
    assert main(["run", "--device", "cpu", "--gpus", "2", "--out", str(tmp_path)]) == 2
    assert "--gpus 2 needs --device cuda" in capsys.readouterr().err
