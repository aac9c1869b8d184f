"""The package's layering (docs/architecture.md): one folder a layer, imports only go down or stay in their folder,
no circle, no import hidden in a function to dodge one, and every module imports on its own in a fresh interpreter."""
import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "roofline_lib"
LAZY_ALLOWED = {"roofline_lib.cli"}  # per-command imports keep `--help` free of torch


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()


def folder_of(name: str) -> str:
    """The folder a module sits in ('the root' for roofline_lib's own __init__ and __main__)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else "the root"


def folder_layers() -> dict[str, int]:
    """docs/architecture.md's first table: folder → layer."""
    rows = re.findall(r"^\| *(\d+) *\| *(?:`(\w+)`|(the root)) *\|", ARCHITECTURE, re.M)
    return {name or root: int(layer) for layer, name, root in rows}


def documented_modules() -> set[str]:
    """docs/architecture.md's second table: the modules it lists, as dotted names, and each folder's package."""
    rows = re.findall(r"^\| *(?:`(\w+)`|(the root)) *\| *`(\w+)` *\|", ARCHITECTURE, re.M)
    names = set()
    for folder, root, module in rows:
        parts = ["roofline_lib"] + ([folder] if folder else []) + ([] if module == "__init__" else [module])
        names.add(".".join(parts))
    return names | {f"roofline_lib.{folder}" for folder in folder_layers() if folder != "the root"}


def layer_of(name: str) -> int:
    return folder_layers()[folder_of(name)]


def imports(name: str) -> list[tuple[str, bool]]:
    """(imported roofline_lib module, inside a function?) for every import in module `name`."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    nested = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f) if n is not f}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            candidates = [f"{target}.{a.name}" for a in node.names] + [target]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in MODULES:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                found.append((candidate, id(node) in nested))
                break
    return found


def test_every_module_is_documented_in_a_folder_with_a_layer():
    assert set(MODULES) == documented_modules(), "docs/architecture.md lists exactly the package's modules"
    assert {folder_of(name) for name in MODULES} == set(folder_layers()), "every folder, and only those, has a layer"


def test_the_root_holds_only_the_entry_points():
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "__main__.py"]


def test_imports_go_down_or_sideways_and_none_hides_in_a_function():
    for name in MODULES:
        for target, lazy in imports(name):
            assert layer_of(target) <= layer_of(name), (
                f"{name} (layer {layer_of(name)}) imports {target} (layer {layer_of(target)})")
            if layer_of(target) == layer_of(name):
                assert folder_of(target) == folder_of(name), f"{name} imports {target}, a folder of its own layer"
            if lazy and name not in LAZY_ALLOWED:
                assert target.startswith("roofline_lib.kernels."), f"{name} imports {target} inside a function"


def test_no_import_circle():
    graph = {name: {t for t, _ in imports(name)} for name in MODULES}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                pytest.fail("import circle: " + " → ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for name in MODULES:
        if name not in state:
            visit(name, [name])


def test_every_module_imports_alone():
    """Each module first in a fresh interpreter (forked after the heavy third-party imports, for speed)."""
    script = textwrap.dedent(f"""
        import importlib, os, sys
        import torch, torch._dynamo, torch.nn.attention.bias, torch.profiler, torch.utils.flop_counter  # third-party,
        import numpy, pandas, matplotlib.pyplot, tqdm.auto  # shared by every child
        try:
            import triton, triton.language
        except ImportError:
            pass
        failed = []
        for name in {sorted(MODULES)!r}:
            pid = os.fork()
            if pid == 0:
                try:
                    importlib.import_module(name)
                except BaseException as exc:
                    print(f"{{name}}: {{type(exc).__name__}}: {{exc}}", flush=True)
                    os._exit(1)
                os._exit(0)
            if os.waitpid(pid, 0)[1] != 0:
                failed.append(name)
        sys.exit(1 if failed else 0)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
