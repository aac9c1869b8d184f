"""Progress bars: off where asked, and sparse where they would fill a log file."""
import io
import sys

from roofline_lib.core import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_into_a_log_file_redraws_rarely_and_one_in_a_terminal_often(monkeypatch):
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a log file: no terminal
    assert progress.progress_bar(range(3), file=sys.stderr).mininterval == progress.LOG_INTERVAL_S
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert progress.progress_bar(range(3), file=sys.stderr).mininterval < 1


def test_bars_are_off_where_asked(monkeypatch):
    monkeypatch.setenv(progress.PROGRESS_ENV, "0")
    assert progress.progress_bar(range(3)).disable


def test_a_new_postfix_waits_for_the_next_redraw_in_a_log_file(monkeypatch):
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    bar = progress.progress_bar(range(3), file=log)
    drawn = log.getvalue()
    for step in range(5):
        bar.set_postfix_str(f"step {step}")
    assert log.getvalue() == drawn  # nothing more than the first draw
    monkeypatch.setattr(sys, "stderr", _Terminal())
    screen = _Terminal()
    bar = progress.progress_bar(range(3), file=screen)
    drawn = screen.getvalue()
    bar.set_postfix_str("step 0")
    assert screen.getvalue() != drawn  # in a terminal a postfix shows at once
