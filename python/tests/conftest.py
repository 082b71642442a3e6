"""What the fusetune tests share: the fusetune binary, a database the real sweep wrote, a
running `fusetune serve`, and the --exit-77-when-all-skipped option (ctest's "skipped")."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # reference.py

# The problem the tests' one sweep tunes on the CPU, as `fusetune sweep` flags and as a Problem.
TUNED = dict(batch=1, q_heads=2, kv_heads=2, q_len=64, kv_len=64, head_dim=32)
TUNED_FLAGS = ["--seq", "64", "--heads", "2", "--head-dim", "32"]
TOKEN = "python-test-token"


def pytest_addoption(parser):
    parser.addoption("--exit-77-when-all-skipped", action="store_true",
                     help="exit 77 (ctest: skipped) when every test was skipped")


def pytest_sessionfinish(session, exitstatus):
    if not session.config.getoption("--exit-77-when-all-skipped"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    if not reporter.stats.get("passed") and reporter.stats.get("skipped"):
        session.exitstatus = 77


@pytest.fixture(scope="session")
def fusetune_binary():
    path = os.environ.get("FUSETUNE_BINARY")
    if not path:
        build = os.environ.get("FUSETUNE_BUILD_DIR")
        path = os.path.join(build, "service", "cli", "fusetune") if build else ""
    if not path or not os.access(path, os.X_OK):
        pytest.skip("no fusetune binary: set FUSETUNE_BINARY (ctest does)")
    return path


@pytest.fixture(scope="session")
def swept_db(tmp_path_factory, fusetune_binary):
    """A database `fusetune sweep` wrote for TUNED on the CPU (a short budget: fused configs,
    a few trials)."""
    path = str(tmp_path_factory.mktemp("sweep") / "fusetune.db")
    subprocess.run([fusetune_binary, "sweep", "--backend", "cpu", *TUNED_FLAGS, "--variants", "fused",
                    "--max-trials", "3", "--final-rounds", "2", "--max-seconds", "10", "--progress", "never",
                    "--db", path], check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return path


class Server:
    """A `fusetune serve` on an ephemeral port, over a copy of a database."""

    def __init__(self, binary, db, workdir):
        token_file = os.path.join(workdir, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        port_file = os.path.join(workdir, "port")
        self.process = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--db", db, "--metrics", "off", "--token-file", token_file,
             "--port-file", port_file, "--refresh-ms", "50"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if self.process.poll() is not None:
                raise RuntimeError("fusetune serve exited: " + self.process.stderr.read().decode())
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("fusetune serve did not write its port file")
            time.sleep(0.05)
        self.port = int(open(port_file).read().split()[0])
        self.address = f"127.0.0.1:{self.port}"

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def server(tmp_path, fusetune_binary, swept_db):
    db = str(tmp_path / "served.db")
    shutil.copy(swept_db, db)
    s = Server(fusetune_binary, db, str(tmp_path))
    yield s
    s.stop()
