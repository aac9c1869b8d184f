"""The notebooks' setup cell (roofline_lib.present.colab.setup_cell), executed outside a checkout in a temporary
folder, with pip replaced: it installs from an uploaded zip when there is one, else from REPO_URL, never
touches torch, and on a failure prints pip's real error and what to do, then stops with one SystemExit."""
import subprocess
import sys
import zipfile

import pytest

import roofline_lib
from roofline_lib.present import colab

# what pip 26 prints in a notebook's kernel when it cannot clone REPO_URL (no network, or a private repository),
# its colours included
CLONE_FAILURE = """\
  \x1b[1merror\x1b[0m: \x1b[1msubprocess-exited-with-error\x1b[0m

  × git clone --filter=blob:none --quiet https://github.com/roofline-lab/roofline /tmp/pip-install-x/roofline-lib did not run successfully.
  │ exit code: 128
  ╰─> [1 lines of output]
      fatal: unable to access 'https://github.com/roofline-lab/roofline/': Could not resolve host: github.com
      [end of output]

  \x1b[1;35mnote\x1b[0m: This error originates from a subprocess, and is likely not a problem with pip.
"""  # noqa: E501 (pip's own line)


@pytest.fixture
def outside_a_checkout(tmp_path, monkeypatch):
    """A working folder with no checkout above it, where `import roofline_lib` fails until pip "installs" it."""
    folder = tmp_path / "content"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setitem(sys.modules, "roofline_lib", None)  # None in sys.modules: the import raises ImportError
    return folder


def fake_pip(monkeypatch, returncode: int, stderr: str = "") -> list[list[str]]:
    """Replace subprocess.run for the cell: record each command; on success, make roofline_lib importable."""
    commands = []

    def run(command, **kwargs):
        commands.append(command)
        if returncode == 0:
            monkeypatch.setitem(sys.modules, "roofline_lib", roofline_lib)
        return subprocess.CompletedProcess(command, returncode, "", stderr)

    monkeypatch.setattr(subprocess, "run", run)
    return commands


def run_cell() -> dict:
    namespace = {}
    exec(colab.setup_cell(), namespace)
    return namespace


def test_without_a_zip_it_installs_from_repo_url_and_keeps_torch(outside_a_checkout, monkeypatch):
    commands = fake_pip(monkeypatch, 0)
    assert run_cell()["roofline_lib"] is roofline_lib
    [command] = commands
    assert command[-1] == f"roofline_lib @ git+{colab.REPO_URL}"
    assert "torch" not in " ".join(command) and "--upgrade" not in command and "-U" not in command


def test_an_uploaded_zip_is_installed_instead_the_newest_one(outside_a_checkout, monkeypatch):
    for name in ("roofline-main.zip", "roofline-main (1).zip"):
        with zipfile.ZipFile(outside_a_checkout / name, "w") as archive:
            archive.writestr("roofline-main/pyproject.toml", "[project]\nname = 'roofline_lib'\n")
    newest = outside_a_checkout / "roofline-main (1).zip"
    newest.touch()
    commands = fake_pip(monkeypatch, 0)
    assert run_cell()["roofline_lib"] is roofline_lib
    assert [command[-1] for command in commands] == [str(newest)]


def test_an_unzipped_upload_is_installed_from_its_folder(outside_a_checkout, monkeypatch):
    (outside_a_checkout / "roofline-main").mkdir()
    (outside_a_checkout / "roofline-main" / "pyproject.toml").write_text("[project]\nname = 'roofline_lib'\n")
    commands = fake_pip(monkeypatch, 0)
    run_cell()
    assert [command[-1] for command in commands] == [str(outside_a_checkout / "roofline-main")]


def test_a_failed_install_shows_pips_real_error_and_what_to_do_then_stops(outside_a_checkout, monkeypatch, capsys):
    fake_pip(monkeypatch, 1, CLONE_FAILURE)
    with pytest.raises(SystemExit) as stop:
        run_cell()
    assert "\n" not in str(stop.value) and "what to do" in str(stop.value)  # one line under the printed steps
    shown = capsys.readouterr().out
    assert "fatal: unable to access 'https://github.com/roofline-lab/roofline/': Could not resolve host" in shown
    assert "originates from a subprocess" not in shown and "exit code" not in shown and "of output]" not in shown
    assert "\x1b" not in shown and "subprocess-exited-with-error" not in shown
    assert "Runtime → Change runtime type → T4 GPU" in shown and "Download ZIP" in shown and "Files pane" in shown


def test_a_pip_crash_shows_its_last_line_not_the_traceback(outside_a_checkout, monkeypatch, capsys):
    crash = ("ERROR: Exception:\nTraceback (most recent call last):\n  File \"pip/_internal/x.py\", line 1, in run\n"
             "    zip = zipfile.ZipFile(zipfp)\nzipfile.BadZipFile: File is not a zip file\n")
    fake_pip(monkeypatch, 2, crash)
    with pytest.raises(SystemExit):
        run_cell()
    shown = capsys.readouterr().out
    assert "zipfile.BadZipFile: File is not a zip file" in shown and "Traceback" not in shown and "File \"" not in shown


def test_in_a_checkout_it_installs_nothing(monkeypatch):
    monkeypatch.chdir(colab.CHECKOUT / "notebooks")
    commands = fake_pip(monkeypatch, 1)
    assert run_cell()["roofline_lib"] is roofline_lib and commands == []


def test_the_cell_is_filled_from_repo_url():
    assert f'REPO_URL = "{colab.REPO_URL}"' in colab.setup_cell()
    assert 'REPO_URL = "https://github.com/a/b"' in colab.setup_cell("https://github.com/a/b")
