"""Containment of agent/sandbox.py with real processes: each escape attempt is its own test.

Run: nice -n 19 .venv/bin/python -m pytest tests/agent/test_sandbox.py
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from agent.sandbox import PROTECTED, run_sandboxed, sandbox_support

SUPPORT = sandbox_support()
LINUX = sys.platform.startswith("linux")
isolated = pytest.mark.skipif(not LINUX, reason="bubblewrap is Linux-only; elsewhere run_sandboxed refuses")
pids_contained = pytest.mark.skipif(
    SUPPORT.pids_cgroup is None and (os.geteuid() == 0 or SUPPORT.isolation == "none"),
    reason="no pids cgroup, and RLIMIT_NPROC does not bind root",
)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


async def sh(command: str, ws: Path, **kwargs):
    kwargs.setdefault("timeout_s", 20)
    return await run_sandboxed(command, workspace_root=ws, **kwargs)


def marker_alive(marker: str, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode != 0:
            return False
        time.sleep(0.05)
    return True


# ---- basics ------------------------------------------------------------------------------------


@isolated
def test_bubblewrap_is_the_level_in_use():
    """`make setup` installs bubblewrap: on Linux any other level is a broken machine, a failure
    here rather than skipped containment tests (tests/agent/test_escape.py shows what a weaker
    level does)."""
    assert SUPPORT.isolation == "bwrap", f"bubblewrap is not usable here: {SUPPORT.notes}"


async def test_runs_in_the_workspace_with_its_real_path(ws: Path):
    result = await sh("pwd; echo made > made.txt; echo out; echo err >&2; echo end", ws)
    assert result.exit_code == 0
    assert result.output == f"{ws}\nout\nerr\nend\n"
    assert (ws / "made.txt").read_text() == "made\n"
    assert result.isolation == "bwrap"
    assert not (result.timed_out or result.cancelled or result.truncated)


async def test_exit_code_and_undecodable_output(ws: Path):
    result = await sh(r"printf 'ok \377\n'; exit 3", ws)
    assert result.exit_code == 3
    assert result.output == "ok \ufffd\n"


async def test_streams_output_while_running(ws: Path):
    seen: list[str] = []

    def on_output(text: str) -> None:
        seen.append(text)
        (ws / "go").touch()  # what the command waits for: only output that streams lets it end

    result = await sh("echo one; until [ -e go ]; do sleep 0.05; done; echo two", ws, on_output=on_output)
    assert not result.timed_out, "the first line reached on_output only after the command ended"
    assert "".join(seen) == result.output == "one\ntwo\n"
    assert seen[0] == "one\n"


async def test_venv_tools_are_on_path(ws: Path):
    result = await sh("python -c 'import jsonschema, sys; print(sys.prefix)' && ruff --version", ws)
    assert result.exit_code == 0, result.output
    assert "ruff" in result.output


# ---- network -----------------------------------------------------------------------------------


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    yield server
    server.close()


def _connect(port: int) -> str:
    return f"python -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=3); print(\"CONNECTED\")'"


@isolated
async def test_no_network_to_a_listener_outside(ws: Path, listener: socket.socket):
    result = await sh(_connect(listener.getsockname()[1]), ws)
    assert result.exit_code != 0 and "CONNECTED" not in result.output
    with pytest.raises(BlockingIOError):
        listener.accept()


@isolated
async def test_no_dns(ws: Path):
    result = await sh("python -c 'import socket; print(socket.getaddrinfo(\"pypi.org\", 443))'", ws)
    assert result.exit_code != 0
    assert "gaierror" in result.output or "unreachable" in result.output.lower()


async def test_network_true_shares_the_network(ws: Path, listener: socket.socket):
    result = await sh(_connect(listener.getsockname()[1]), ws, network=True)
    assert "CONNECTED" in result.output, result.output


# ---- filesystem --------------------------------------------------------------------------------


@isolated
async def test_cannot_write_system_files(ws: Path):
    name = f"composer-test-{uuid.uuid4().hex}"
    result = await sh(f"touch /etc/{name} /usr/{name}", ws)
    assert result.exit_code != 0 and "Read-only file system" in result.output
    assert not Path(f"/etc/{name}").exists() and not Path(f"/usr/{name}").exists()


@isolated
async def test_home_writes_stay_in_the_sandbox(ws: Path):
    name = f"composer-test-{uuid.uuid4().hex}"
    for home in {str(Path.home()), "/root"}:
        await sh(f"echo x > {home}/{name}; echo x > ~/{name}", ws)
        assert not Path(home, name).exists()


@isolated
async def test_tmp_is_private_and_fresh_each_run(ws: Path):
    name = f"composer-test-{uuid.uuid4().hex}"
    first = await sh(f"echo x > /tmp/{name} && cat /tmp/{name}", ws)
    assert first.output == "x\n"
    assert not Path("/tmp", name).exists()
    second = await sh(f"cat /tmp/{name}", ws)
    assert second.exit_code != 0


@isolated
async def test_secrets_in_the_home_directory_are_hidden(ws: Path):
    secret = Path.home() / f".composer-test-secret-{uuid.uuid4().hex}"
    secret.write_text("hunter2\n")
    try:
        result = await sh(f"cat {secret} 2>/dev/null || echo cat-failed; ls -a {Path.home()}; "
                          "cat /etc/shadow 2>/dev/null || echo shadow-failed", ws)
    finally:
        secret.unlink()
    assert "hunter2" not in result.output and "cat-failed" in result.output
    assert secret.name not in result.output
    assert "shadow-failed" in result.output


@isolated
async def test_git_config_hooks_and_composer_settings_are_read_only(ws: Path):
    for rel in PROTECTED:
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
    (ws / ".git/config").write_text("[core]\n")
    (ws / ".git/hooks").mkdir()
    (ws / ".composer").mkdir()
    result = await sh("echo '[core] fsmonitor = evil' >> .git/config; touch .git/hooks/post-checkout "
                      ".composer/permissions.json; touch .git/index && echo index-ok", ws)
    assert (ws / ".git/config").read_text() == "[core]\n"
    assert not (ws / ".git/hooks/post-checkout").exists()
    assert not (ws / ".composer/permissions.json").exists()
    assert "index-ok" in result.output


# ---- environment -------------------------------------------------------------------------------


async def test_environment_is_scrubbed(ws: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("COMPOSER_TEST_API_TOKEN", "tok-123")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-456")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-789")
    result = await sh("env", ws, env={"EXTRA": "given"})
    for leaked in ("tok-123", "aws-456", "sk-789", "COMPOSER_TEST_API_TOKEN", "AWS_", "OPENAI_"):
        assert leaked not in result.output
    env = dict(line.split("=", 1) for line in result.output.splitlines() if "=" in line)
    assert env["TERM"] == "dumb" and env["EXTRA"] == "given"
    assert env["HOME"] != str(Path.home())


# ---- limits ------------------------------------------------------------------------------------


@pids_contained
async def test_fork_bomb_is_contained_and_the_harness_keeps_working(ws: Path):
    bomb_started = time.monotonic()
    bomb = asyncio.create_task(sh(":(){ :|:& };:; sleep 2", ws, timeout_s=4, max_processes=64))
    await asyncio.sleep(0.5)
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork
    forked = time.monotonic()
    result = await bomb
    assert forked < bomb_started + result.duration_s, "the host forked only once the bomb had ended"
    assert result.duration_s < 8
    assert "fork" in result.output and "Resource temporarily unavailable" in result.output
    after = await sh("echo alive", ws)
    assert after.output == "alive\n"
    if SUPPORT.pids_cgroup is not None:
        assert not list(SUPPORT.pids_cgroup.glob(f"composer-run-{os.getpid()}-*"))


async def test_endless_output_is_capped_and_killed(ws: Path):
    result = await sh("yes", ws, max_output_bytes=100_000, timeout_s=30)
    assert result.truncated and result.exit_code is None
    assert len(result.output) == 100_000
    assert result.duration_s < 20  # stopped by the cap, not at the 30 s timeout


async def test_a_command_that_never_exits_is_killed_at_the_timeout(ws: Path):
    result = await sh("echo before; sleep 1000", ws, timeout_s=1)
    assert result.timed_out and result.exit_code is None
    assert result.output == "before\n"
    assert 1 <= result.duration_s < 60  # not the 1000 s the command asks for


@pytest.mark.skipif(SUPPORT.isolation == "none" and SUPPORT.pids_cgroup is None, reason="no pid namespace or cgroup")
async def test_double_fork_setsid_escape_is_killed_when_the_command_ends(ws: Path):
    marker = f"composer-escape-{uuid.uuid4().hex}"
    result = await sh(f"(setsid bash -c 'sleep 1000; : {marker}' &) & sleep 0.3; "
                      f"pgrep -f {marker} >/dev/null && echo escaped-child-running", ws)
    assert result.exit_code == 0 and "escaped-child-running" in result.output
    assert not marker_alive(marker)


@pytest.mark.skipif(SUPPORT.isolation == "none" and SUPPORT.pids_cgroup is None, reason="no pid namespace or cgroup")
async def test_double_fork_escape_is_killed_at_the_timeout(ws: Path):
    marker = f"composer-escape-{uuid.uuid4().hex}"
    result = await sh(f"(setsid bash -c 'sleep 1000; : {marker}' &) & sleep 1000", ws, timeout_s=1)
    assert result.timed_out
    assert not marker_alive(marker)


async def test_cancellation_kills_at_once(ws: Path):
    cancelled = asyncio.Event()
    asyncio.get_running_loop().call_later(0.5, cancelled.set)
    result = await sh("echo started; sleep 1000", ws, cancelled=cancelled)
    assert result.cancelled and not result.timed_out and result.exit_code is None
    assert result.output == "started\n"
    assert result.duration_s < 60  # not the 1000 s the command asks for


async def test_task_cancellation_kills_the_process(ws: Path):
    marker = f"composer-cancel-{uuid.uuid4().hex}"
    task = asyncio.create_task(sh(f"bash -c 'sleep 1000; : {marker}'", ws))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not marker_alive(marker)


async def test_file_size_is_capped(ws: Path):
    result = await sh("head -c 3000000 /dev/zero > big", ws, max_file_bytes=1_000_000)
    assert result.exit_code != 0
    assert (ws / "big").stat().st_size <= 1_000_000


async def test_memory_is_capped(ws: Path):
    result = await sh("python -c 'x = bytearray(2 * 1024**3)'", ws, memory_bytes=1024**3)
    assert result.exit_code != 0 and "MemoryError" in result.output


async def test_bad_arguments_raise(ws: Path):
    with pytest.raises(ValueError, match="not a directory"):
        await sh("true", ws / "missing")
    with pytest.raises(ValueError, match="timeout_s"):
        await sh("true", ws, timeout_s=0)


# ---- fallback level ----------------------------------------------------------------------------

unshare_only = pytest.mark.skipif("unshare" not in SUPPORT.available, reason="unshare level unavailable")


@unshare_only
async def test_unshare_level_contains_the_basics(ws: Path, listener: socket.socket):
    name = f"composer-test-{uuid.uuid4().hex}"
    secret = Path.home() / f".composer-test-secret-{uuid.uuid4().hex}"
    secret.write_text("hunter2\n")
    try:
        result = await sh(f"echo ok > inws; touch /etc/{name}; cat {secret}; {_connect(listener.getsockname()[1])}; "
                          "env; python -c 'print(7*6)'", ws, isolation="unshare", env={"X": "1"})
    finally:
        secret.unlink()
    assert result.isolation == "unshare"
    assert (ws / "inws").read_text() == "ok\n"
    assert not Path(f"/etc/{name}").exists()
    assert "hunter2" not in result.output and "CONNECTED" not in result.output
    assert "TERM=dumb" in result.output and "42" in result.output


@unshare_only
async def test_unshare_level_kills_escapes_and_times_out(ws: Path):
    marker = f"composer-escape-{uuid.uuid4().hex}"
    result = await sh(f"(setsid bash -c 'sleep 1000; : {marker}' &) & sleep 1000", ws, timeout_s=1,
                      isolation="unshare")
    assert result.timed_out and result.duration_s < 60
    assert not marker_alive(marker)


async def test_plain_level_still_limits_time_and_output(ws: Path):
    result = await sh("yes", ws, isolation="none", max_output_bytes=10_000)
    assert result.truncated and result.isolation == "none"
    result = await sh("sleep 1000", ws, isolation="none", timeout_s=0.5)
    assert result.timed_out and result.duration_s < 60
