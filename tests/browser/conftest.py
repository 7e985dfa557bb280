"""Fixtures for the end-to-end browser tests: a real JupyterLab server and headless Chromium.

Nothing here touches the network: the server listens on 127.0.0.1 only, its update and
news checks are off, Chromium's background services are off, and every browser request
that is not to a loopback address is aborted and recorded (tests assert there were none).
Both the server (with its kernels) and the browser are shut down by fixture finalizers,
so they go away even when a test fails.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

CHROMIUM = Path(os.environ.get("TOOLKIT_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    # Any host name other than loopback resolves to nothing.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
]
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
SERVER_START_TIMEOUT = 60.0


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "browser: drives a real browser (needs system chromium + playwright)"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


@dataclass
class LabServer:
    url: str
    token: str
    root_dir: Path
    log_path: Path
    proc: subprocess.Popen = field(repr=False)

    def api(self, path: str, method: str = "GET", timeout: float = 5.0):
        req = urllib.request.Request(
            f"{self.url}{path}", method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "<no server log>"


def _stop_server(proc: subprocess.Popen, server: LabServer | None) -> None:
    """Ask the server to shut down (which stops its kernels), then make sure of it."""
    try:
        import psutil

        leftovers = psutil.Process(proc.pid).children(recursive=True)
    except Exception:  # psutil missing or the server already gone
        leftovers = []
    if server is not None and proc.poll() is None:
        try:
            server.api("/api/shutdown", method="POST")
        except Exception:
            pass
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
    # Kernels run in their own sessions, so they are not in the server's process group.
    for child in leftovers:
        try:
            if child.is_running():
                child.kill()
        except Exception:
            pass


@pytest.fixture(scope="module")
def lab_server_config():
    """Extra server configuration (``jupyter_server_config.json``); a module overrides it."""
    return {}


@pytest.fixture(scope="module")
def lab_root_before_start():
    """Called with the server's root folder before the server starts (a module overrides
    it to lay out what the server reads only at start, such as nbgrader_config.py); it may
    return environment variables for the server (say, JUPYTER_CONFIG_PATH)."""
    return None


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory, lab_server_config, lab_root_before_start):
    """A JupyterLab server on 127.0.0.1 with private config/data/runtime dirs."""
    base = tmp_path_factory.mktemp("jupyterlab")
    root = base / "root"
    config_dir, data_dir, runtime_dir = base / "config", base / "data", base / "runtime"
    for d in (root, config_dir, data_dir, runtime_dir, base / "ipython", base / "mpl"):
        d.mkdir()
    extra_env = (lab_root_before_start(root) if lab_root_before_start is not None else None) or {}
    settings = config_dir / "lab" / "user-settings" / "@jupyterlab"
    # Attach every cell (so off-screen widget views render), start the notebook's kernel
    # without asking, and never fetch news.
    _write_json(settings / "notebook-extension" / "tracker.jupyterlab-settings",
                {"windowingMode": "none", "autoStartDefaultKernel": True})
    _write_json(settings / "apputils-extension" / "notification.jupyterlab-settings",
                {"fetchNews": "false", "checkForUpdates": False})
    if lab_server_config:
        _write_json(config_dir / "jupyter_server_config.json", lab_server_config)

    env = dict(os.environ)
    env.pop("TOOLKIT_HEADLESS", None)  # the widgets must really draw
    env.update(
        JUPYTER_CONFIG_DIR=str(config_dir),
        JUPYTER_DATA_DIR=str(data_dir),  # the venv's share/jupyter stays on the data path
        JUPYTER_RUNTIME_DIR=str(runtime_dir),
        IPYTHONDIR=str(base / "ipython"),
        MPLCONFIGDIR=str(base / "mpl"),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra_env)
    port, token = _free_port(), secrets.token_hex(24)
    cmd = [
        sys.executable, "-m", "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.open_browser=False",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers often run as root
        cmd.append("--allow-root")
    log_path = base / "server.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    server = LabServer(f"http://127.0.0.1:{port}", token, root, log_path, proc)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{server.log_tail()}")
            try:
                server.api("/api/status", timeout=2)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"jupyter lab did not answer /api/status in "
                            f"{SERVER_START_TIMEOUT:.0f}s:\n{server.log_tail()}")
            time.sleep(0.25)
        yield server
    finally:
        _stop_server(proc, server)
        log.close()


@dataclass
class Browser:
    context: object
    blocked: list[str]

    def new_page(self):
        return self.context.new_page()


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    """Headless system Chromium (never a downloaded one) that can only reach loopback."""
    if not CHROMIUM.exists() or not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
    )
    profile = tmp_path_factory.mktemp("chromium-profile")
    blocked: list[str] = []

    def only_loopback(route):
        url = route.request.url
        parts = urlsplit(url)
        if parts.scheme in ("data", "blob") or parts.hostname in LOOPBACK_HOSTS:
            route.continue_()
        else:
            blocked.append(url)
            route.abort("internetdisconnected")

    pw = sync_api.sync_playwright().start()
    context = None
    try:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000},
            service_workers="block",
            timeout=60_000,
        )
        context.route("**/*", only_loopback)
        yield Browser(context, blocked)
    finally:
        try:
            if context is not None:
                context.close()
        finally:
            pw.stop()
            shutil.rmtree(profile, ignore_errors=True)
