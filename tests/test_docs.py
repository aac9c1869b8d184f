"""The repository cites only what it contains: every repository path named in the docs, the code, the notebooks
and the tests exists, and the design reference they cite by section is the one in docs/."""
import glob
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATH = re.compile(r"(?<![\w/.])((?:results|figures|docs|notebooks|benchmarks|roofline_lib|tests|\.ci)/"
                  r"[\w./*<>{}-]*[\w*/])")
SOURCES = [p for p in ROOT.rglob("*") if p.is_file() and p.suffix in (".md", ".py", ".ipynb", ".toml")
           and not {".git", ".venv"} & set(p.relative_to(ROOT).parts) and p.relative_to(ROOT).parts[0] != "runs"]


def test_every_cited_repository_path_exists():
    missing = {}
    for source in SOURCES:
        for cited in PATH.findall(source.read_text(errors="ignore")):
            cited = cited.rstrip(".")
            if any(c in cited for c in "<>{}"):  # a pattern such as runs/<device>_<dtype>/
                continue
            found = glob.glob(str(ROOT / cited), recursive=True) if "*" in cited else (ROOT / cited).exists()
            if not found:
                missing.setdefault(cited, []).append(str(source.relative_to(ROOT)))
    assert not missing, f"cited but not in the repository: {missing}"


def test_sections_cited_exist_in_the_design_page():
    design = (ROOT / "docs" / "design.md").read_text()
    sections = set(re.findall(r'<a id="s(\d+)"></a>', design))
    assert sections >= {"1", "2", "3", "4", "5", "6"}
    for source in SOURCES:
        text = source.read_text(errors="ignore")
        assert "DESIGN.md" not in text or source.name == "test_docs.py", f"{source} cites a file not in the repository"
        for section in re.findall(r"design\.md §(\d+)", text):
            assert section in sections, f"{source} cites §{section}, which docs/design.md does not have"
