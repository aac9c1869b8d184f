"""The repository's public address and the "Open in Colab" badges built from it.

`REPO_URL` is where the address is set: the README's badges are built from it, and a test checks that
every notebook's setup cell (which installs the package from it outside a checkout) names the same
address. When the repository is published or forked, set it here and run the test to find the cells.
"""
from __future__ import annotations

import json
from pathlib import Path

REPO_URL = "https://github.com/roofline-lab/roofline"  # placeholder owner: the single place to change it
BRANCH = "main"  # the branch the Colab badges open
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
CHECKOUT = Path(__file__).resolve().parents[2]  # the repository root (above roofline_lib/present/) in a checkout


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
