"""training.envs on real overlays, real bubblewrap sandboxes and a real Ray cluster: diffs that
`git apply` takes back, grading in a fresh view, escape attempts (network, host files, fork
bomb, disk filling, memory), the harness's tools and a scripted Session on an environment,
bases built once, the scheduler's stages and admission, reaping after `kill -9`, 200
environments without leaks, and the same core jobs on Ray.

Run: .venv/bin/python -m pytest tests/training/test_envs.py        (-m "not slow": ~20 s)
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from scripted_policy import ScriptedPolicy

import agent.sandbox
from agent.isolation import UnsandboxedError
from agent.policy import Reply
from agent.sandbox import sandbox_support
from agent.session import default_tools
from model.toolcalls import ToolCall
from training.envs import (
    Base,
    BaseBuildError,
    BaseSpec,
    EnvClosedError,
    Environment,
    Job,
    Limits,
    Scheduler,
    SchedulerClosedError,
    grade,
)
from training.envs.env import WORKSPACE_ALIAS
from training.envs.fs import mounts_under, probe_levels
from training.envs.registry import leftovers

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024**2
OVERLAY = os.geteuid() == 0 and "overlay" in probe_levels().available
needs_overlay = pytest.mark.skipif(not OVERLAY, reason="kernel overlay needs root here")


def make_tree(root: Path) -> Path:
    """A small repo-like tree with the awkward cases: binary, executable, symlink, no final
    newline, spaces and non-ASCII in names, nested directories, a .git dir and a .gitignore."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (root / "pkg" / "mod.py").write_text("".join(f"line {i}\n" for i in range(40)))
    (root / "pkg" / "sub" / "deep.txt").write_text("deep\n")
    (root / "gone").mkdir()
    (root / "gone" / "a.txt").write_text("a\n")
    (root / "gone" / "b.txt").write_text("b\n")
    (root / "noeol.txt").write_text("no newline")
    (root / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "link").symlink_to("pkg/mod.py")
    (root / "name with space.txt").write_text("spaced\n")
    (root / "caf\u00e9.txt").write_text("caf\u00e9\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_value.py").write_text("from pkg import VALUE\n\ndef test_value():\n    assert VALUE == 2\n")
    return root


def manifest(root: Path) -> dict[str, tuple]:
    """Path -> (kind, mode bits, content) of every file and symlink outside .git."""
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            else:
                found[rel] = ("file", path.stat().st_mode & 0o111 != 0, path.read_bytes())
    return found


EDITS = """
set -e
echo 'VALUE = 2' > pkg/__init__.py
sed -i 's/line 20/LINE TWENTY/' pkg/mod.py
rm -r gone
printf 'now with newline\\n' > noeol.txt
printf '\\000\\001changed' > blob.bin
chmod -x run.sh
rm link && ln -s pkg/__init__.py link
mkdir -p new/dir && echo fresh > new/dir/file.txt
mv 'name with space.txt' 'renamed space.txt'
echo more >> 'caf\u00e9.txt'
rm pkg/sub/deep.txt && echo replaced > pkg/sub/deep.txt
echo junk > debug.log && mkdir -p build __pycache__ && echo x > build/out && echo x > __pycache__/m.pyc
echo notes > .git/notes
"""


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    return {"state_dir": tmp_path / "state", "base_dir": tmp_path / "bases"}


@pytest.fixture
async def base(tmp_path: Path, dirs) -> Base:
    return await Base.build(BaseSpec(key="demo", source=str(make_tree(tmp_path / "src"))),
                            dirs["base_dir"])


# ---- environments -----------------------------------------------------------------------------


async def test_isolation_level_reported(base, dirs):
    async with await Environment.create(base, state_dir=dirs["state_dir"]) as env:
        fs, sandbox = env.isolation.split("+")
        assert sandbox == "bwrap", sandbox_support().notes  # make setup installs bubblewrap
        assert fs == ("overlay" if OVERLAY else "copy")
        assert (env.root / "pkg" / "mod.py").read_text().startswith("line 0")
    assert leftovers(dirs["state_dir"]) == []


async def test_a_weaker_sandbox_needs_the_opt_in(base, dirs, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # no user opt-in
    weak = dataclasses.replace(sandbox_support(), isolation="none", available=("none",))
    monkeypatch.setattr(agent.sandbox, "_support", weak)
    with pytest.raises(UnsandboxedError, match=r"Refused to run a training environment.*--allow-unsandboxed"):
        await Environment.create(base, state_dir=dirs["state_dir"])
    with pytest.raises(UnsandboxedError, match="the scheduler's worker"):
        await Scheduler(cpus=1, **dirs).start()
    with pytest.raises(UnsandboxedError):
        await Base.build(BaseSpec(key="setup", setup=("touch made",)), dirs["base_dir"])
    assert leftovers(dirs["state_dir"]) == []
    async with await Environment.create(base, state_dir=dirs["state_dir"], allow_unsandboxed=True) as env:
        assert env.isolation.endswith("+none") and env.session_config().allow_unsandboxed
        assert env.tool_context().state["sandbox"]["unsandboxed"] == "allow"
        assert (await env.run("echo ran")).output == "ran\n"
        assert (await env.grade(["true"])).passed


@needs_overlay
async def test_overlay_without_disk_quota(base, dirs):
    async with await Environment.create(base, limits=Limits(disk_bytes=None), state_dir=dirs["state_dir"]) as env:
        assert env.isolation.startswith("overlay") and not env.layer.quota
        assert (await env.run("echo x > new.txt && cat new.txt")).output == "x\n"
        assert env.layer.upper.is_relative_to(dirs["state_dir"].resolve()) and "b/new.txt" in env.diff()
    assert leftovers(dirs["state_dir"]) == []


@pytest.mark.parametrize("filesystem", [pytest.param("overlay", marks=needs_overlay), "copy"])
async def test_diff_applies_back_exactly(base, dirs, filesystem):
    async with await Environment.create(base, state_dir=dirs["state_dir"], filesystem=filesystem) as env:
        result = await env.run(EDITS)
        assert result.exit_code == 0, result.output
        diff = env.diff()
        expected = manifest(env.root)
    for skipped in ("debug.log", "build/out", "__pycache__", ".git/notes"):
        assert skipped not in diff
    assert "GIT binary patch" in diff and "new mode 100644" in diff and "\\ No newline" in diff
    for junk in ("debug.log", "build/out", "__pycache__/m.pyc"):
        expected.pop(junk)
    async with await Environment.create(base, state_dir=dirs["state_dir"], filesystem=filesystem) as fresh:
        applied = await fresh.apply(diff)
        assert applied.exit_code == 0 and "patching file" not in applied.output, applied.output
        assert manifest(fresh.root) == expected
        assert fresh.diff() == diff  # the same changes read back the same way
    assert manifest(base.path)["pkg/__init__.py"][2] == b"VALUE = 1\n"  # the base is untouched


async def test_grading_runs_in_a_fresh_view(base, dirs):
    async with await Environment.create(base, state_dir=dirs["state_dir"]) as env:
        await env.run("echo 'VALUE = 2' > pkg/__init__.py && echo junk > debug.log && "
                      "mkdir -p build && echo x > build/leak && (sleep 30 &)")
        checks = ["test ! -e debug.log", "test ! -e build/leak", "grep -q 'VALUE = 2' pkg/__init__.py",
                  "python3 -m pytest -q -p no:cacheprovider tests"]
        result = await env.grade(checks)
        assert result.passed and result.applied, [r.output for r in result.results]
        assert (env.root / "debug.log").exists()  # the agent's view is left as it was
        failed = await env.grade(["python3 -m pytest -q -p no:cacheprovider tests"], diff="")
        assert not failed.passed and failed.applied
        bad = await env.grade(["true"], diff="diff --git a/nope b/nope\n--- a/nope\n+++ b/nope\n@@ -1 +1 @@\n-x\n+y\n")
        assert not bad.applied and not bad.passed and bad.results == ()
    test_patch = "--- a/tests/test_value.py\n+++ b/tests/test_value.py\n@@ -4 +4 @@\n-    assert VALUE == 2\n+    assert VALUE == 1\n"
    alone = await grade(base, ["python3 -m pytest -q -p no:cacheprovider tests"], patches=[test_patch],
                        state_dir=dirs["state_dir"])
    assert alone.passed, alone.apply_output
    assert leftovers(dirs["state_dir"]) == []


async def test_close_is_idempotent_and_final(base, dirs):
    env = await Environment.create(base, state_dir=dirs["state_dir"])
    await env.close()
    await env.close()
    with pytest.raises(EnvClosedError):
        await env.run("true")
    with pytest.raises(EnvClosedError):
        env.diff()
    assert leftovers(dirs["state_dir"]) == [] and mounts_under(dirs["state_dir"]) == []


# ---- escapes ----------------------------------------------------------------------------------


def _send_to(port: int) -> str:
    code = (f"import socket; s = socket.create_connection(('127.0.0.1', {port}), timeout=3); "
            "s.sendall(b'leak'); s.close(); print('SENT')")
    return f"python3 -c {shlex.quote(code)}"


def _received(listener: socket.socket) -> bytes:
    """What reached the listener (connections already made wait in its backlog)."""
    got = b""
    listener.setblocking(False)
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return got
        with conn:
            conn.settimeout(5)
            got += conn.recv(100)


async def test_no_network(base, dirs):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        async with await Environment.create(base, state_dir=dirs["state_dir"]) as env:
            result = await env.run(_send_to(port), timeout_s=20)
        assert result.exit_code == 1 and "SENT" not in result.output
        assert "ConnectionRefusedError" in result.output  # the sandbox's own empty loopback
        assert _received(listener) == b""
        # the control: the same command with the network shared reaches the listener
        async with await Environment.create(base, limits=Limits(network=True), state_dir=dirs["state_dir"]) as env:
            shared = await env.run(_send_to(port), timeout_s=20)
        assert shared.output == "SENT\n" and _received(listener) == b"leak"


async def test_host_files_protected(base, dirs, tmp_path):
    secret = Path.home() / ".composer-test-secret"
    secret.write_text("s3cret")
    try:
        async with await Environment.create(base, state_dir=dirs["state_dir"]) as env:
            # tmp_path is under /tmp, a private tmpfs inside: a write there may succeed in the
            # sandbox, and must not reach the host.
            script = f"""
            for target in /etc/evil {base.path}/evil /usr/evil {base.path}/pkg/evil; do
              (echo x > $target) 2>/dev/null && echo "WROTE $target"
            done
            echo x > {tmp_path}/evil 2>/dev/null
            cat {secret} 2>/dev/null; cat /etc/shadow; ls -A /root /home | grep -v '^/' ; true
            echo tmp-only > /tmp/inside && cat /tmp/inside
            """
            result = await env.run(textwrap.dedent(script))
            assert "WROTE" not in result.output and "s3cret" not in result.output
            assert "root:" not in result.output and "tmp-only" in result.output
        for target in (Path("/etc/evil"), base.path / "evil", tmp_path / "evil", Path("/tmp/inside"),
                       base.path / "pkg" / "evil"):
            assert not target.exists()
    finally:
        secret.unlink()


FORK_COUNT = """
import errno, os, time
n = 0
try:
    while n < 400:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as err:
    print("refused", errno.errorcode[err.errno])
print("forked", n)
"""


async def test_fork_bomb_is_contained(base, dirs):
    forked = {}
    for limit in (64, 160):
        limits = Limits(max_processes=limit, timeout_s=30)
        async with await Environment.create(base, limits=limits, state_dir=dirs["state_dir"]) as env:
            count = await env.run(f"python3 -c {shlex.quote(FORK_COUNT)}", timeout_s=20)
            assert "refused EAGAIN" in count.output, count.output
            forked[limit] = int(count.output.split("forked ")[1])
            if limit == 64:
                bomb = await env.run("bomb() { bomb | bomb & }; bomb; sleep 2; echo survived", timeout_s=4)
                assert bomb.timed_out or bomb.exit_code is not None
                after = await env.run("echo alive")
                assert after.exit_code == 0 and after.output.strip() == "alive"
    # The limit is what stopped the forks: each count stays under its own limit (a few processes
    # of the sandbox itself count too), and the higher limit let more through.
    assert 48 <= forked[64] < 64 and 144 <= forked[160] < 160, forked
    assert subprocess.run(["true"]).returncode == 0  # the host still forks


@needs_overlay
async def test_disk_filling_is_capped(base, dirs):
    limits = Limits(disk_bytes=32 * MIB, max_file_bytes=16 * MIB)
    async with await Environment.create(base, limits=limits, state_dir=dirs["state_dir"]) as env:
        one = await env.run("head -c 64M /dev/zero > big; ls -l big | awk '{print $5}'")
        assert int(one.output.split()[-1]) <= 16 * MIB  # RLIMIT_FSIZE cut the file
        many = await env.run("for i in 1 2 3 4 5 6; do head -c 10M /dev/zero > f$i || echo FULL; done; du -sm . | cut -f1")
        assert "FULL" in many.output or "No space left" in many.output
        assert env.layer.quota
        cleanup = await env.run("rm -f big f* && echo ok")
        assert cleanup.output.strip() == "ok"


async def test_memory_limit(base, dirs):
    allocate = "python3 -c 'x = bytearray(320 * 1024**2); print(\"ALLOCATED\", len(x) >> 20)'"
    async with await Environment.create(base, limits=Limits(memory_bytes=256 * MIB),
                                        state_dir=dirs["state_dir"]) as env:
        result = await env.run(allocate)
    assert result.exit_code == 1 and result.output.rstrip().endswith("MemoryError"), result.output
    # the control: without the limit the same allocation succeeds
    async with await Environment.create(base, limits=Limits(memory_bytes=None), state_dir=dirs["state_dir"]) as env:
        unlimited = await env.run(allocate)
    assert unlimited.exit_code == 0 and unlimited.output == "ALLOCATED 320\n"


# ---- the harness on an environment ------------------------------------------------------------


async def test_default_tools_work_on_an_environment(base, dirs):
    async with await Environment.create(base, limits=Limits(timeout_s=60), state_dir=dirs["state_dir"]) as env:
        tools, ctx = default_tools(), env.tool_context()
        assert ctx.state["sandbox"]["max_timeout_s"] == 60
        wrote = await tools.call("write_file", {"path": "notes.md", "content": "hello\n"}, ctx)
        edited = await tools.call("edit_file", {"path": "pkg/__init__.py", "old_string": "VALUE = 1",
                                                "new_string": "VALUE = 2"}, ctx)
        ran = await tools.call("run_terminal", {"command": "cat notes.md pkg/__init__.py && pwd"}, ctx)
        assert wrote.ok and edited.ok and ran.ok, (wrote.error, edited.error, ran.error)
        assert "hello" in ran.output and "VALUE = 2" in ran.output and str(env.root) in ran.output
        diff = env.diff()
        assert "+VALUE = 2" in diff and "b/notes.md" in diff
        assert (await env.grade(["python3 -m pytest -q -p no:cacheprovider tests"])).passed


async def test_every_environment_shows_the_model_the_same_prompt(base, dirs, tmp_path):
    """The workspace is named by one alias, so two environments' prompts are the same tokens
    (the engine's prefix cache and the trainer's shared prefixes depend on it)."""
    prompts = []
    for _ in range(2):
        async with await Environment.create(base, state_dir=dirs["state_dir"]) as env:
            session = await env.open_session(ScriptedPolicy([]), log_dir=tmp_path / "logs")
            system = session.agent.messages[0]["content"]
            prompts.append(system)
            assert str(env.root) not in system
            read = await session.agent.tools.call("read_file", {"path": f"{WORKSPACE_ALIAS}/pkg/__init__.py"},
                                                  session.agent.ctx)
            assert read.ok and "VALUE = 1" in read.output, read.error
            session.close()
    assert prompts[0] == prompts[1] and f"repository at {WORKSPACE_ALIAS}." in prompts[0]


async def test_session_rollout_on_an_environment(base, dirs, tmp_path):
    replies = [Reply("", [ToolCall("edit_file", {"path": "pkg/__init__.py", "old_string": "VALUE = 1",
                                                 "new_string": "VALUE = 2"})], "tool_calls"),
               Reply("", [ToolCall("run_terminal", {"command": "python3 -m pytest -q -p no:cacheprovider tests"})],
                     "tool_calls")]
    async with await Environment.create(base, state_dir=dirs["state_dir"]) as env:
        session = await env.open_session(ScriptedPolicy(replies), log_dir=tmp_path / "logs", repo_map_tokens=0)
        turn = await session.prompt("make the test pass")
        session.close()
        assert turn.tool_calls == 2
        assert session.agent.ctx.state["sandbox"]["network"] is False
        assert (await env.grade(["python3 -m pytest -q -p no:cacheprovider tests"])).passed


# ---- bases ------------------------------------------------------------------------------------


async def test_base_is_built_once_and_content_addressed(tmp_path, dirs):
    src = make_tree(tmp_path / "src")
    spec = BaseSpec(key="repo@v1", source=str(src), setup=("echo built >> setup.log",))
    built = await asyncio.gather(*(Base.build(spec, dirs["base_dir"]) for _ in range(5)))
    assert len({b.path for b in built}) == 1
    assert (built[0].path / "setup.log").read_text() == "built\n"
    again = await Base.build(spec, dirs["base_dir"])
    assert again.path == built[0].path and (again.path / "setup.log").read_text() == "built\n"
    other = await Base.build(BaseSpec(key="repo@v1", source=str(src), setup=("true",)), dirs["base_dir"])
    assert other.path != built[0].path
    broken = BaseSpec(key="broken", source=str(src), setup=("echo oops; exit 3",))
    with pytest.raises(BaseBuildError, match="oops"):
        await Base.build(broken, dirs["base_dir"])
    with pytest.raises(BaseBuildError):
        await Base.build(BaseSpec(key="missing", source=str(tmp_path / "nope")), dirs["base_dir"])


# ---- the scheduler ----------------------------------------------------------------------------


async def fix_value(env: Environment) -> str:
    result = await env.run("sed -i 's/VALUE = 1/VALUE = 2/' pkg/__init__.py && echo fixed")
    return result.output.strip()


async def broken_rollout(env: Environment) -> None:
    raise RuntimeError("the policy crashed")


def core_jobs(spec: BaseSpec) -> list[Job]:
    tests = ("python3 -m pytest -q -p no:cacheprovider tests",)
    return [Job(base=spec, run=fix_value, tests=tests, limits=Limits(cpus=0.5)),
            Job(base=spec, commands=("echo 'VALUE = 2' > pkg/__init__.py",), tests=tests),
            Job(base=spec, commands=("true",), tests=tests),
            Job(base=spec, run=broken_rollout, tests=tests),
            Job(base=spec, setup=("exit 7",), commands=("true",)),
            Job(base=BaseSpec(key="bad", setup=("exit 1",)), commands=("true",))]


def check_core_results(results) -> None:
    fixed, commands, unchanged, crashed, bad_setup, bad_base = results
    assert fixed.ok and fixed.passed and fixed.output == "fixed" and "+VALUE = 2" in fixed.diff
    assert set(fixed.timings) >= {"queue", "setup", "run", "grade", "total"}
    assert commands.passed and commands.output[0].exit_code == 0
    assert unchanged.ok and not unchanged.passed and unchanged.diff == ""
    assert crashed.error_stage == "run" and "the policy crashed" in crashed.error
    assert bad_setup.error_stage == "setup" and "exit" in bad_setup.error and bad_setup.attempts == 1
    assert bad_base.error_stage == "setup" and "BaseBuildError" in bad_base.error


async def test_scheduler_core_jobs(tmp_path, dirs):
    spec = BaseSpec(key="demo", source=str(make_tree(tmp_path / "src")))
    sched = Scheduler(cpus=2, max_concurrency=4, **dirs)
    with pytest.raises(SchedulerClosedError):
        await sched.submit(Job(base=spec))
    async with sched:
        await sched.prepare(spec)
        results = await sched.map(core_jobs(spec))
        check_core_results(results)
        assert results[0].isolation.startswith("overlay" if OVERLAY else "copy")
        health = await sched.health()
        assert health[0]["open_envs"] == 0 and health[0]["registered_dirs"] == 0
        stats = sched.stats()
        assert stats.done == 3 and stats.failed == 3 and stats.live == 0 and stats.cpus_used == 0
    with pytest.raises(SchedulerClosedError):
        await sched.submit(Job(base=spec))
    assert leftovers(dirs["state_dir"]) == []


async def test_scheduler_admission_and_backpressure(tmp_path, dirs):
    base = Base.from_dir(make_tree(tmp_path / "src"))
    running, peak = [0], [0]

    async def rollout(env: Environment) -> None:
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await env.run("sleep 0.3")
        running[0] -= 1

    async with Scheduler(cpus=1, max_concurrency=3, max_queue=5, **dirs) as sched:
        jobs = [Job(base=base, run=rollout, limits=Limits(cpus=0.5)) for _ in range(10)]
        pending = asyncio.gather(*(sched.submit(job) for job in jobs))
        await asyncio.sleep(0.2)
        stats = sched.stats()
        assert stats.blocked == 5 and stats.live + stats.queued == 5 and stats.live <= 3
        results = await pending
        assert all(r.ok for r in results) and peak[0] == 2  # 1 CPU / 0.5 per job
        big = [Job(base=base, run=rollout, limits=Limits(cpus=4)) for _ in range(3)]
        peak[0] = 0
        assert all(r.ok for r in await sched.map(big)) and peak[0] == 1  # capped at 1 CPU: alone


async def test_scheduler_health_check_rebuilds(tmp_path, dirs, monkeypatch):
    base = Base.from_dir(make_tree(tmp_path / "src"))
    calls = []
    healthy = Environment.healthy

    async def flaky(self):
        calls.append(self.id)
        return len(calls) > 1 and await healthy(self)

    monkeypatch.setattr(Environment, "healthy", flaky)
    async with Scheduler(cpus=2, **dirs) as sched:
        result = await sched.submit(Job(base=base, commands=("true",)))
    assert result.ok and len(calls) == 2 and calls[0] != calls[1]
    assert leftovers(dirs["state_dir"]) == []


# ---- crashes and leaks ------------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def with_marker(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def run_cgroups(pid: int) -> list[Path]:
    base = sandbox_support().pids_cgroup
    return list(base.glob(f"composer-run-{pid}-*")) if base else []


CHILD = """
import asyncio, sys
from training.envs import Base, Job, Limits, Scheduler
N = 6
async def rollout(env):
    await env.run("sleep 61.7", timeout_s=120)
async def main():
    async with Scheduler(cpus=2, max_concurrency=N, state_dir=sys.argv[1], base_dir=sys.argv[2]) as s:
        base = Base.from_dir(sys.argv[3])
        await s.map([Job(base=base, run=rollout, tests=("true",), limits=Limits(cpus=0.1, timeout_s=120))
                     for _ in range(N)])
asyncio.run(main())
"""


@pytest.mark.slow
async def test_kill_9_leaves_nothing_start_does_not_clean(tmp_path, dirs):
    tree = make_tree(tmp_path / "src")
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(dirs["state_dir"]), str(dirs["base_dir"]),
                              str(tree)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while len(with_marker("sleep 61.7")) < 6 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert len(with_marker("sleep 61.7")) >= 6, "the child's rollouts never started"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    stale = leftovers(dirs["state_dir"])
    assert any(p.endswith("/merged") for p in stale)  # what the crash left: overlays, dirs
    async with Scheduler(cpus=2, **dirs) as sched:
        reports = await sched.health()
        assert reports[0]["open_envs"] == 0
    assert leftovers(dirs["state_dir"]) == []
    assert mounts_under(tmp_path) == []
    assert run_cgroups(child.pid) == []
    deadline = time.monotonic() + 10
    while with_marker("sleep 61.7") and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert with_marker("sleep 61.7") == []


def our_mounts(pid: str, *needles: str) -> set[str]:
    """Lines of a mount table that mention our paths (other tests may mount things meanwhile)."""
    return {line for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
            if any(n in line for n in needles)}


@pytest.mark.slow
async def test_200_environments_leave_nothing(base, dirs, tmp_path):
    # This process's environment dirs and the temp dirs probes make; not "composer-" at large,
    # since another process on the machine (an eval, a trainer) may hold environments meanwhile.
    needles = (str(tmp_path), f"/env-{os.getpid()}.", "composer-probe-", "composer-fsprobe-",
               "composer-home-")
    before = {"self": our_mounts("self", *needles), "host": our_mounts("1", *needles),
              "tmp": {n for n in os.listdir("/tmp") if n.startswith("composer")}}
    semaphore = asyncio.Semaphore(16)
    isolations = set()

    async def one(i: int) -> int | None:
        async with semaphore, await Environment.create(base, state_dir=dirs["state_dir"],
                                                       limits=Limits(timeout_s=60)) as env:
            isolations.add(env.isolation)
            result = await env.run(f"echo {i} > out.txt && cat out.txt && (sleep 300 &)")
            return result.exit_code if result.output.strip() == str(i) else -1

    started = time.perf_counter()
    codes = await asyncio.gather(*(one(i) for i in range(200)))
    elapsed = time.perf_counter() - started
    assert codes == [0] * 200, f"{sum(c != 0 for c in codes)} failed"
    print(f"200 environments in {elapsed:.1f} s ({200 / elapsed:.0f}/s), {isolations}")
    assert descendants(os.getpid()) == []
    assert our_mounts("self", *needles) - before["self"] == set()
    assert our_mounts("1", *needles) - before["host"] == set()
    assert mounts_under(dirs["state_dir"]) == [] and leftovers(dirs["state_dir"]) == []
    assert {n for n in os.listdir("/tmp") if n.startswith("composer")} <= before["tmp"]
    assert run_cgroups(os.getpid()) == []


# ---- Ray --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray
    ray.shutdown()


@pytest.mark.slow
async def test_ray_backend_core_jobs_and_lost_actor(ray_cluster, tmp_path, dirs):
    spec = BaseSpec(key="demo", source=str(make_tree(tmp_path / "src")))
    async with Scheduler(backend="ray", actors=2, cpus_per_actor=0.5, max_concurrency=4, **dirs) as sched:
        assert sched.cpus == 2.0
        results = await sched.map(core_jobs(spec))
        check_core_results(results)
        assert len({r.worker for r in results if r.worker}) >= 1
        victim = sched._backend.actors[0]
        job = Job(base=spec, commands=("sleep 2 && echo 'VALUE = 2' > pkg/__init__.py",),
                  tests=("python3 -m pytest -q -p no:cacheprovider tests",), retries=1)
        sched._backend.load[victim] = -100  # the next job goes to the victim
        pending = asyncio.ensure_future(sched.submit(job))
        await asyncio.sleep(1.0)
        ray_cluster.kill(victim, no_restart=True)
        result = await pending
        assert result.passed and result.attempts == 2, result.error
        assert victim not in sched._backend.actors and len(sched._backend.actors) == 2
        assert all("dead" not in report for report in await sched.health())
    assert leftovers(dirs["state_dir"]) == []
    assert mounts_under(tmp_path) == []
