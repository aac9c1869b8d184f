"""The README's Python example runs as written and says what it claims: both rungs pass §3, one speedup."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    section = (ROOT / "README.md").read_text().split("## In Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the README's 'In Python' section has one python block"
    return blocks[0]


@pytest.mark.slow
def test_the_readme_example_runs_as_written(tmp_path):
    code = readme_example()
    assert len(code.strip().splitlines()) <= 14, "a short example"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "", "ROOFLINE_PROGRESS": "0"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["no_empty_mask", "chunked", "no_empty_mask"]
    assert all("§3 passed" in line for line in lines[:2]), done.stdout
    assert re.search(r"\d+\.\d\d× the reference's speed", lines[2]), done.stdout
    assert done.stderr == "", done.stderr
