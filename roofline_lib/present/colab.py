"""The repository's public address, the "Open in Colab" badges built from it, and the notebooks' one setup cell.

`REPO_URL` is where the address is set: the README's badges are built from it, and so is `setup_cell()`, the
text of every notebook's first code cell (a test checks each notebook's against it). When the repository is
published or forked, set it here, then paste `setup_cell()` into the notebooks the test names.
"""
from __future__ import annotations

import json
from pathlib import Path
from string import Template

REPO_URL = "https://github.com/roofline-lab/roofline"  # placeholder owner: the single place to change it
BRANCH = "main"  # the branch the Colab badges open
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
CHECKOUT = Path(__file__).resolve().parents[2]  # the repository root when running from a checkout


def in_checkout() -> bool:
    """Whether this package runs from a checkout of the repository (not from an installed copy)."""
    return (CHECKOUT / "pyproject.toml").is_file() and (CHECKOUT / "notebooks").is_dir()


def colab_url(notebook: str) -> str:
    """The Colab address that opens `notebooks/<notebook>` from REPO_URL's `BRANCH`."""
    prefix = "https://github.com/"
    if not REPO_URL.startswith(prefix):
        raise ValueError(f"REPO_URL must be a GitHub address ({prefix}owner/name), got {REPO_URL!r}")
    return f"https://colab.research.google.com/github/{REPO_URL[len(prefix):]}/blob/{BRANCH}/notebooks/{notebook}"


def notebook_title(path: Path) -> str:
    """The first markdown heading of a notebook (.ipynb), without the #s."""
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    raise ValueError(f"{path} has no markdown heading to use as its title")


def colab_badges_markdown(notebooks_dir: Path | None = None) -> str:
    """A markdown table with one 'Open in Colab' badge per notebook in `notebooks_dir` (the checkout's notebooks/)."""
    if notebooks_dir is None:
        if not in_checkout():
            raise ValueError("not running from a checkout: pass notebooks_dir")
        notebooks_dir = CHECKOUT / "notebooks"
    paths = sorted(Path(notebooks_dir).glob("*.ipynb"))
    if not paths:
        raise ValueError(f"no .ipynb notebooks in {notebooks_dir}")
    lines = ["| notebook | |", "|---|---|"]
    lines += [f"| [{notebook_title(p)}](notebooks/{p.name}) | [![Open In Colab]({COLAB_BADGE})]({colab_url(p.name)}) |"
              for p in paths]
    return "\n".join(lines) + "\n"


# The first code cell of every notebook, character for character (tests/test_notebooks.py checks it; it cannot
# import roofline_lib, which it installs, so it is kept here as text). `setup_cell()` fills in REPO_URL.
_SETUP_CELL = Template('''\
# Setup. In a checkout (notebooks/ the working folder) the checkout's roofline_lib is used, with no network.
# Elsewhere (Colab) it is installed from a zip of the repository uploaded next to this notebook, if there is
# one, else from REPO_URL; the installed torch is kept. If that fails, this cell prints pip's own error and
# what to do, and stops the run here.
REPO_URL = "$repo_url"  # set in roofline_lib/present/colab.py
import importlib
import re
import subprocess
import sys
from pathlib import Path

if (Path.cwd().parent / "roofline_lib" / "__init__.py").is_file():  # a checkout: notebooks/ is the working folder
    sys.path.insert(0, str(Path.cwd().parent))
try:
    import roofline_lib
except ImportError:
    uploaded = [*Path.cwd().glob("roofline*.zip"), *(p.parent for p in Path.cwd().glob("roofline*/pyproject.toml"))]
    source = str(max(uploaded, key=lambda p: p.stat().st_mtime)) if uploaded else f"roofline_lib @ git+{REPO_URL}"
    print(f"Installing roofline_lib from {source} ...")
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], capture_output=True, text=True)
    if pip.returncode != 0:
        plain = re.sub(r"\\x1b\\[[0-9;]*m", "", pip.stdout + pip.stderr)  # in a notebook's kernel pip colours its text
        lines = [line.strip(" │╰─>×") for line in plain.splitlines()]
        if "Traceback (most recent call last):" in lines:  # pip crashed: its last line says why
            lines = lines[:lines.index("Traceback (most recent call last):")] + lines[-1:]
        noise = ("note:", "hint:", "error: subprocess-exited-with-error", "ERROR: Exception:", "[notice]", "exit code:")
        why = [line for line in lines if line and not line.startswith(noise) and not line.endswith("of output]")]
        print("pip could not install it:", *(why[-6:] or [f"pip exited with status {pip.returncode}"]), sep="\\n    ")
        print("What to do:\\n"
              "    1. In Colab, Runtime → Change runtime type → T4 GPU.\\n"
              "    2. If the repository is not public (or pip cannot reach it), download it as a zip (on GitHub:\\n"
              "       Code → Download ZIP) and upload the zip with the Files pane (the folder icon on the left),\\n"
              "       keeping its name roofline….zip.\\n"
              "    3. Run this notebook again (Runtime → Run all): this cell then installs from the zip.\\n"
              "    In a checkout, open the notebook with notebooks/ as the working folder instead; for a fork, set\\n"
              "    REPO_URL above and in roofline_lib/present/colab.py.")
        raise SystemExit("roofline_lib is not installed: see what to do above, then run the notebook again.")
    importlib.invalidate_caches()
    import roofline_lib
''')


def setup_cell(repo_url: str | None = None) -> str:
    """The text of every notebook's first code cell, installing from `repo_url` (default: REPO_URL)."""
    return _SETUP_CELL.substitute(repo_url=REPO_URL if repo_url is None else repo_url)
