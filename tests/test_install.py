"""The notebooks' setup cell on the install path a Colab user takes: a fresh virtual environment that already
holds torch and the usual scientific stack (as Colab's does), roofline_lib installed by the cell itself from
a git URL (a bare clone of this checkout, through file://), then notebook 00 executed there in smoke mode,
with the least time budget."""
import os
import re
import site
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")  # the notebook extras (CI has them; a bare GPU machine may not)

ROOT = Path(__file__).resolve().parents[1]


def preinstalled(tmp_path: Path) -> Path:
    """A folder that shows this environment's packages, roofline_lib left out: what the fresh venv 'already holds'."""
    folder = tmp_path / "preinstalled"
    folder.mkdir()
    for source in site.getsitepackages():
        for entry in Path(source).iterdir():
            if not entry.name.lower().startswith(("roofline_lib", "__editable__", "_roofline")) \
                    and not entry.name.endswith(".pth") and not (folder / entry.name).exists():
                (folder / entry.name).symlink_to(entry)
    return folder


@pytest.mark.notebook
def test_the_setup_cell_installs_from_the_repository_and_notebook_00_runs(tmp_path):
    bare = tmp_path / "roofline.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(ROOT), str(bare)], check=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "preinstalled.pth").write_text(str(preinstalled(tmp_path)) + "\n")
    missing = subprocess.run([python, "-c", "import roofline_lib"], capture_output=True, text=True, cwd=tmp_path)
    assert missing.returncode != 0, "the fresh venv must not see this checkout's roofline_lib"

    nb = nbformat.read(ROOT / "notebooks" / "00_overview.ipynb", as_version=4)
    setup = next(c for c in nb.cells if c.cell_type == "code" and "REPO_URL = " in c.source)
    setup.source = re.sub(r'^REPO_URL = "[^"]+"', f'REPO_URL = "file://localhost{bare}"', setup.source, flags=re.M)
    colab = tmp_path / "colab"  # not a checkout: the cell has to install
    colab.mkdir()
    nbformat.write(nb, colab / "00_overview.ipynb")
    runner = ("import nbclient, nbformat, sys\n"
              "nb = nbformat.read('00_overview.ipynb', as_version=4)\n"
              "nbclient.NotebookClient(nb, kernel_name='python3', timeout=300,"
              " resources={'metadata': {'path': '.'}}).execute()\n"
              "errors = [o for c in nb.cells for o in c.get('outputs', []) if o.output_type == 'error']\n"
              "sys.exit(1 if errors else 0)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"ROOFLINE_SMOKE": "1", "ROOFLINE_BUDGET": "0", "ROOFLINE_PROGRESS": "0",
            "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}"}
    done = subprocess.run([python, "-c", runner], cwd=colab, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    installed = subprocess.run([python, "-c",
                                "import roofline_lib, pathlib; print(pathlib.Path(roofline_lib.__file__))"],
                               capture_output=True, text=True, cwd=colab, env=env, check=True).stdout
    assert str(venv) in installed, "roofline_lib came from the fresh venv's own install"
