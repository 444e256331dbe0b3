"""`make grade`'s first install: torch from the CPU wheel index on Linux, the default index when that
index cannot be reached (what happens on machines without internet beyond the package registries)."""
import http.server
import threading

import pytest
from conftest import ROOT

from autograder.sandbox import install


@pytest.fixture
def pip_calls(monkeypatch):
    calls = []

    class Done:
        returncode = 0

    monkeypatch.setattr(install.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or Done())
    monkeypatch.setattr(install, "installed", lambda pin: False)  # a first install (this venv has torch already)
    return calls


def test_an_installed_torch_asks_no_index_and_says_nothing(pip_calls, monkeypatch, capsys):
    """Found by strangers: a make target that found the venv's stamp older than the requirements re-ran the install,
    which probed the CPU index (10 s where it cannot be reached) and warned about a torch it was not going to
    install. The pinned torch already there: no probe, no warning, one pip call that has nothing to do."""
    monkeypatch.setattr(install, "installed", lambda pin: True)
    monkeypatch.setattr(install, "reachable", lambda index, timeout=10.0: pytest.fail("the index was probed"))
    monkeypatch.setenv("TORCH_INDEX", "http://127.0.0.1:9/whl/cpu")
    assert install.main([str(ROOT / "requirements-student.txt")]) == 0
    assert capsys.readouterr().err == ""
    assert len(pip_calls) == 1 and pip_calls[0][-2:] == ["-r", str(ROOT / "requirements-student.txt")]


def test_installed_compares_the_pinned_version():
    from importlib.metadata import version

    assert install.installed(f"torch=={version('torch')}") and not install.installed("torch==0.0.1")
    # a local build (2.13.0+cpu) is the pinned version: pip takes it as one, and no index is asked
    public = version("torch").split("+")[0]
    assert install.installed(f"torch=={public}") and not install.installed(f"torch=={public}.1")


def test_unreachable_index_falls_back_with_one_warning(pip_calls, monkeypatch, capsys):
    monkeypatch.setenv("TORCH_INDEX", "http://127.0.0.1:9/whl/cpu")  # nothing listens on port 9
    assert install.main([str(ROOT / "requirements-student.txt")]) == 0
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and "cannot be reached" in warning[0] and "default index" in warning[0]
    assert len(pip_calls) == 1 and pip_calls[0][-2:] == ["-r", str(ROOT / "requirements-student.txt")]


class Index(http.server.BaseHTTPRequestHandler):
    """A package index that answers every page (enough for the reachability probe)."""

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"<html></html>")

    def log_message(self, *args):
        pass


def test_reachable_index_gives_torch_first(pip_calls, monkeypatch, capsys):
    server = http.server.HTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        index = f"http://127.0.0.1:{server.server_port}/whl/cpu"
        monkeypatch.setenv("TORCH_INDEX", index)
        assert install.main([str(ROOT / "requirements-student.txt")]) == 0
    finally:
        server.shutdown()
    assert capsys.readouterr().err == ""
    torch_call, rest = pip_calls
    pin = next(line.split()[0] for line in (ROOT / "requirements-student.txt").read_text().splitlines()
               if line.startswith("torch=="))
    assert torch_call[-1] == pin
    assert torch_call[torch_call.index("--index-url") + 1] == index
    assert rest[-2:] == ["-r", str(ROOT / "requirements-student.txt")]


def test_default_index_on_linux_and_none_elsewhere(monkeypatch):
    monkeypatch.delenv("TORCH_INDEX", raising=False)
    monkeypatch.setattr(install.sys, "platform", "linux")
    assert install.torch_index() == install.CPU_INDEX
    monkeypatch.setattr(install.sys, "platform", "darwin")
    assert install.torch_index() == ""
    monkeypatch.setenv("TORCH_INDEX", "")
    monkeypatch.setattr(install.sys, "platform", "linux")
    assert install.torch_index() == ""  # TORCH_INDEX= : the default index


def test_the_pin_is_found_through_includes():
    assert install.torch_pin(ROOT / "requirements-dev.txt") == install.torch_pin(ROOT / "requirements-student.txt")
    assert install.torch_pin(ROOT / "requirements-dev.txt").startswith("torch==")
