"""The web chat page (server/static/) in a real browser: headless Debian Chromium driven by
Playwright against `python -m server --ws`, whose model is tests/server/scripted_model.py.

    .venv/bin/pytest tests/server/test_web_page.py -q

Review mode, a prompt typed into the page, the streamed answer, the permission card with the
edit's diff, then accept (the file changes, Undo puts it back, a reload replays the session) or
reject (the file stays); the proposal edited in the card before allowing it (the person's text
is what gets written; a command has nothing to edit, and allowing unedited sends no _meta); Undo
after a shell command that rewrote the tree (byte-identical again); the sandbox level, and on a
machine without bubblewrap its warning and a question before every command; and the websocket
refusing a missing token or a foreign Origin. "Review changes" after a turn that edited two
far-apart lines of a file: one change undone (only the other stays on disk, the list shrinks),
the other kept (sent as keep, marked kept); a change undone or kept after the file moved on is
refused with the reason shown (a refused keep is not marked kept, and the file is listed again),
a binary file is listed with its note, and Keep all keeps the rest; after a reload the button is
there still (the session keeps the turn's checkpoint), and a turn that changed nothing says so
in the panel.
Chromium comes from `make browser-deps` (apt); without it the browser tests skip.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from no_sandbox import stubbed_path
from scripted_model import ScriptedModel
from workspace_tree import SHELL_CHANGES, SHELL_TURN, changed_paths, make_tree, snapshot

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium")
GREETING = 'print("hello")\n'
SCRIPT = [[{"text": "I will change the **greeting** in `hello.py`, *carefully*: 2*3 stays.",
            "tool_calls": [{"name": "edit_file",
                            "arguments": {"path": "hello.py", "old_string": "hello", "new_string": "goodbye"}}]},
           {"text": "Changed it."}]]
REQUEST = "Please change the greeting in hello.py"
CONFIG = "".join(f"value_{i} = {i}\n" for i in range(20))  # config.py: 20 lines
# one step, two edits far apart (lines 2 and 18): two hunks of one file
TWO_EDITS = [{"name": "edit_file", "arguments": {"path": "config.py", "old_string": f"value_{i} = {i}",
                                                 "new_string": f"value_{i} = {i * 100}"}} for i in (1, 17)]
URL_RE = re.compile(r"(http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_\-]+))")
TIMEOUT_MS = 20_000

pytestmark = pytest.mark.slow

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make browser-deps)")


@dataclass
class Server:
    url: str
    port: int
    token: str
    workspace: Path
    model: ScriptedModel
    process: subprocess.Popen
    output: list[str]


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    """`python -m server --ws` on a free port over a workspace holding hello.py; an indirect
    parameter names sandbox tools to stub out (("bwrap", "unshare"): the `none` level)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "hello.py").write_text(GREETING)
    env = dict(os.environ, COMPOSER_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    if getattr(request, "param", ()):
        env.update(PATH=stubbed_path(tmp_path / "stubs", *request.param), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    with ScriptedModel(SCRIPT) as model:
        process = subprocess.Popen(
            [sys.executable, "-m", "server", "--ws", "127.0.0.1:0", "--workspace", str(workspace),
             "--endpoint", model.url, "--log-dir", str(tmp_path / "logs")],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: queue.Queue[str | None] = queue.Queue()
        output: list[str] = []

        def pump() -> None:
            for line in process.stdout:
                output.append(line)
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        try:
            match, deadline = None, time.monotonic() + 60
            while match is None:
                try:
                    line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    line = None
                if line is None:
                    pytest.fail("the server printed no http://127.0.0.1:PORT/?token=... line:\n" + "".join(output))
                match = URL_RE.search(line)
            yield Server(match[1], int(match[2]), match[3], workspace, model, process, output)
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (make browser-deps)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        yield browser
        browser.close()


@pytest.fixture
def sent() -> list[dict]:
    """The JSON-RPC messages the page sends over its websocket, in order (`page` records them)."""
    return []


@pytest.fixture
def page(browser, server: Server, sent: list[dict]) -> Iterator[object]:
    """A fresh browser tab on the chat page; fails the test on any error of the page's own (the
    server's window/logMessage errors, which the page logs to the console, are not the page's)."""
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    problems: list[str] = []
    page.on("pageerror", lambda err: problems.append(f"page error: {err}"))
    page.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}")
            if msg.type == "error" and not msg.text.startswith("composer server:") else None)
    # watched before the page opens its socket: the frames say what the page answered, not the server
    page.on("websocket", lambda ws: ws.on("framesent", lambda payload: sent.append(json.loads(payload))))
    page.goto(server.url)
    yield page
    context.close()
    assert not problems, "\n".join(problems) + "\n--- server output:\n" + "".join(server.output)


def ask_for_the_edit(page) -> object:
    """Review mode, the request typed and sent with Enter; returns the permission card."""
    from playwright.sync_api import expect

    expect(page.locator("#connection")).to_have_attribute("data-state", "connected")
    expect(page.locator("#isolation")).to_have_text("Sandbox: bwrap")  # make setup installs bubblewrap
    page.select_option("#mode", "review")
    page.fill("#prompt", REQUEST)
    page.press("#prompt", "Enter")
    expect(page.locator(".message.user")).to_contain_text(REQUEST)
    expect(page.locator("#prompt")).to_have_value("")
    said = page.locator(".message.agent").first
    expect(said).to_contain_text("I will change the greeting in hello.py, carefully: 2*3 stays.")
    expect(said.locator("strong")).to_have_text("greeting")  # Markdown emphasis, as text nodes
    expect(said.locator("code")).to_have_text("hello.py")
    expect(said.locator("em")).to_have_text("carefully")
    card = page.locator(".permission")
    expect(card).to_be_visible()
    expect(card.locator(".permission-title")).not_to_be_empty()
    expect(card.locator(".diff-del")).to_have_text('-print("hello")')
    expect(card.locator(".diff-add")).to_have_text('+print("goodbye")')
    expect(page.locator("#cancel")).to_be_visible()   # the turn is running, waiting for the answer
    expect(page.locator("#mode")).to_have_value("review")
    return card


@needs_chromium
def test_accepting_the_diff_edits_the_file_and_undo_restores_it(page, server: Server) -> None:
    from playwright.sync_api import expect

    hello = server.workspace / "hello.py"
    card = ask_for_the_edit(page)
    assert hello.read_text() == GREETING, "the edit reached the file before it was accepted"

    card.locator('button[data-option-id="allow_once"]').click()
    expect(card).to_have_attribute("data-outcome", "allow_once")
    tool = page.locator(".tool-call")
    expect(tool).to_have_count(1)
    expect(tool).to_have_attribute("data-status", "completed")
    expect(tool.locator(".tool-head .tool-kind")).to_have_attribute("data-kind", "edit")
    expect(page.locator(".message.agent").last).to_contain_text("Changed it.")
    expect(page.locator(".note.turn-end")).to_have_attribute("data-stop-reason", "end_turn")
    expect(page.locator("#cancel")).to_be_hidden()
    expect(page.locator("#send")).to_be_enabled()
    assert hello.read_text() == 'print("goodbye")\n'
    # the two model steps were asked in review mode, with the request as the user message
    assert any(m.get("content") == REQUEST for m in server.model.requests[0]["messages"])

    # the session is in the sidebar, titled by its request
    expect(page.locator("#sessions .session-item[aria-current=true]")).to_contain_text("change the greeting")

    page.click("#undo")
    expect(page.locator(".note.rewind")).to_contain_text("hello.py")
    assert hello.read_text() == GREETING

    # a reload reopens the session from the address: session/load replays its history
    session_id = page.locator("#sessions .session-item[aria-current=true]").get_attribute("data-session-id")
    assert session_id and f"#session={session_id}" in page.url
    page.reload()
    expect(page.locator("#connection")).to_have_attribute("data-state", "connected")
    expect(page.locator("#mode")).to_have_value("review")  # the tab put its mode back
    expect(page.locator(".message.user")).to_contain_text(REQUEST)
    expect(page.locator(".message.agent").last).to_contain_text("Changed it.")
    expect(page.locator(".tool-call")).to_have_attribute("data-status", "completed")


def permission_answers(sent: list[dict]) -> list[dict]:
    """The page's answers to session/request_permission among the messages it sent."""
    return [m["result"] for m in sent if isinstance(m.get("result"), dict) and "outcome" in m["result"]]


def open_the_editor(card) -> object:
    """Clicks the card's Edit; returns the textarea holding the proposal's new text."""
    from playwright.sync_api import expect

    edit = card.get_by_role("button", name="Edit")
    expect(edit).to_have_attribute("aria-expanded", "false")
    edit.click()
    expect(edit).to_have_attribute("aria-expanded", "true")
    box = card.get_by_role("textbox", name=re.compile(r"Your version of hello\.py"))  # its label names it
    expect(box).to_be_focused()
    expect(box).to_have_value('print("goodbye")\n')
    return box


@needs_chromium
def test_editing_the_proposal_writes_the_persons_text(page, server: Server, sent: list[dict]) -> None:
    from playwright.sync_api import expect

    hello = server.workspace / "hello.py"
    mine = 'print("goodbye, world")\n# checked by a person\n'
    card = ask_for_the_edit(page)
    box = open_the_editor(card)
    box.fill(mine)
    # the card's diff follows the typing: it shows what allowing writes
    expect(card.locator(".diff-add")).to_have_text(['+print("goodbye, world")', "+# checked by a person"])
    expect(card.locator(".revision-tag")).to_have_text(" edited by you")
    assert hello.read_text() == GREETING, "the edit reached the file before it was allowed"
    box.press("Escape")  # closes the editor; focus goes to Edit
    card.get_by_role("button", name="Edit").press("Escape")  # a second Escape keeps the unsent changes
    expect(card).not_to_have_attribute("data-outcome", "cancelled")
    card.get_by_role("button", name="Edit").click()
    expect(box).to_have_value(mine)

    card.locator('button[data-option-id="allow_once"]').click()
    expect(card).to_have_attribute("data-outcome", "allow_once")
    expect(card.locator(".permission-answer")).to_have_text("You chose: Allow (with your changes)")
    expect(box).to_be_hidden()
    expect(page.locator(".note.turn-end")).to_have_attribute("data-stop-reason", "end_turn")
    assert permission_answers(sent) == [{"outcome": {"outcome": "selected", "optionId": "allow_once"},
                                         "_meta": {"composer": {"revisedText": mine}}}]
    assert hello.read_text() == mine
    # the completed call shows what was written, and the model heard about the person's change
    expect(page.locator(".tool-call .tool-body .diff-add")).to_have_text(['+print("goodbye, world")',
                                                                         "+# checked by a person"])
    assert "checked by a person" in json.dumps(server.model.requests[1]["messages"])


@needs_chromium
def test_allowing_without_editing_writes_the_proposal(page, server: Server, sent: list[dict]) -> None:
    from playwright.sync_api import expect

    card = ask_for_the_edit(page)
    box = open_the_editor(card)
    box.press("End")  # looked at, moved about in, left as it was
    box.press("Escape")  # closes the editor, and does not cancel the turn as Escape elsewhere would
    expect(box).to_be_hidden()
    expect(card.get_by_role("button", name="Edit")).to_be_focused()
    card.locator('button[data-option-id="allow_always"]').click()
    expect(card).to_have_attribute("data-outcome", "allow_always")
    expect(page.locator(".note.turn-end")).to_have_attribute("data-stop-reason", "end_turn")
    assert permission_answers(sent) == [{"outcome": {"outcome": "selected", "optionId": "allow_always"}}]
    assert (server.workspace / "hello.py").read_text() == 'print("goodbye")\n'


@needs_chromium
def test_a_command_question_offers_no_edit(page, server: Server, sent: list[dict]) -> None:
    from playwright.sync_api import expect

    command = "echo made > made.txt"  # review mode asks before every command
    server.model.script = [[{"text": "", "tool_calls": [{"name": "run_terminal", "arguments": {"command": command}}]},
                            {"text": "Made it."}]]
    expect(page.locator("#connection")).to_have_attribute("data-state", "connected")
    page.select_option("#mode", "review")
    page.fill("#prompt", "make a file")
    page.press("#prompt", "Enter")
    card = page.locator(".permission")
    expect(card.locator(".permission-input")).to_have_text(f"$ {command}")
    expect(card.get_by_role("button", name="Edit")).to_have_count(0)
    expect(card.locator("textarea")).to_have_count(0)
    card.locator('button[data-option-id="allow_once"]').click()
    expect(page.locator(".note.turn-end")).to_have_attribute("data-stop-reason", "end_turn")
    assert permission_answers(sent) == [{"outcome": {"outcome": "selected", "optionId": "allow_once"}}]
    assert (server.workspace / "made.txt").read_text() == "made\n"


@needs_chromium
def test_a_running_commands_output_shows_open_at_its_newest_line(page, server: Server) -> None:
    from playwright.sync_api import expect

    command = "for i in $(seq 1 40); do echo line $i; done; sleep 2; echo more; sleep 2; echo all done"
    server.model.script = [[{"text": "", "tool_calls": [{"name": "run_terminal", "arguments": {"command": command}}]},
                            {"text": "Ran it."}]]
    expect(page.locator("#connection")).to_have_attribute("data-state", "connected")
    page.fill("#prompt", "count")
    page.press("#prompt", "Enter")
    page.locator('.permission button[data-option-id="allow_once"]').click()  # the rules ask about `seq`
    tool = page.locator(".tool-call")
    expect(tool).to_have_attribute("data-status", "in_progress")
    output = tool.locator("details.tool-output")
    expect(output.locator("pre")).to_contain_text("line 40")
    expect(output).to_have_attribute("open", "")  # 40 lines, open while it runs
    assert output.locator("pre").evaluate("p => p.scrollTop > 0 && p.scrollTop + p.clientHeight >= p.scrollHeight - 2"), \
        "the newest lines are in view"
    output.locator("summary").click()  # the person folds it: the next lines do not open it again
    expect(output.locator("pre")).to_contain_text("more")
    assert output.get_attribute("open") is None, "folded while it runs"  # now: the turn ends 2 s later
    output.locator("summary").click()  # unfolded again: at its newest lines, not its oldest
    page.wait_for_timeout(100)
    assert output.locator("pre").evaluate("p => p.scrollTop > 0 && p.scrollTop + p.clientHeight >= p.scrollHeight - 2")
    expect(tool).to_have_attribute("data-status", "completed")
    expect(tool.locator("details.tool-output pre")).to_contain_text("all done")
    expect(tool.locator("details.tool-output")).not_to_have_attribute("open", "")  # folded once it ended


@needs_chromium
def test_undo_after_a_shell_turn_restores_the_tree_byte_for_byte(page, server: Server) -> None:
    from playwright.sync_api import expect

    make_tree(server.workspace)
    before = snapshot(server.workspace)
    server.model.script = SHELL_TURN
    expect(page.locator("#connection")).to_have_attribute("data-state", "connected")
    page.fill("#prompt", "reorganise the tree")
    page.press("#prompt", "Enter")
    card = page.locator(".permission")  # no rule allows this command: it is asked about
    card.locator('button[data-option-id="allow_once"]').click()
    expect(page.locator(".tool-call")).to_have_attribute("data-status", "completed")
    expect(page.locator(".note.turn-end")).to_have_attribute("data-stop-reason", "end_turn")
    assert set(changed_paths(before, snapshot(server.workspace))) >= SHELL_CHANGES

    page.click("#undo")
    expect(page.locator(".note.rewind")).to_contain_text("src/lib.py")
    assert changed_paths(before, snapshot(server.workspace)) == []

    page.get_by_test_id("forget-turn").click()  # and out of the conversation
    expect(page.locator(".note.rewind")).to_contain_text("Composer forgot the turn")
    page.reload()  # session/load: the forgotten turn is not shown again
    expect(page.locator("#connection")).to_have_attribute("data-state", "connected")
    expect(page.locator("#sessions .session-item[aria-current=true]")).to_have_count(1)  # it is the one shown
    expect(page.locator(".message.user")).to_have_count(0)


def review_sent(sent: list[dict]) -> list[dict]:
    """The params of the page's composer/reviewHunks requests, in order."""
    return [m["params"] for m in sent if m.get("method") == "composer/reviewHunks"]


def run_turn(page, text: str) -> None:
    """Types `text` into the prompt box (agent mode) and sends it with Enter."""
    from playwright.sync_api import expect

    expect(page.locator("#connection")).to_have_attribute("data-state", "connected")
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")


def open_review(page) -> object:
    """Clicks Review changes; returns the panel once it lists something."""
    from playwright.sync_api import expect

    button = page.get_by_role("button", name="Review changes")
    expect(button).to_be_visible()
    expect(button).to_have_attribute("aria-expanded", "false")
    button.click()
    expect(button).to_have_attribute("aria-expanded", "true")
    panel = page.get_by_role("region", name="Review changes")
    expect(panel).to_be_visible()
    expect(panel.locator(".review-file")).not_to_have_count(0)
    return panel


@needs_chromium
def test_review_changes_undoes_one_hunk_and_keeps_the_other(page, server: Server, sent: list[dict]) -> None:
    from playwright.sync_api import expect

    config = server.workspace / "config.py"
    config.write_text(CONFIG)
    server.model.script = [[{"text": "", "tool_calls": TWO_EDITS}, {"text": "Changed both."}]]
    expect(page.locator("#connection")).to_have_attribute("data-state", "connected")
    expect(page.locator("#review-changes")).to_be_hidden()  # nothing changed yet
    run_turn(page, "change values 1 and 17")
    expect(page.locator(".note.turn-end")).to_have_attribute("data-stop-reason", "end_turn")
    both = CONFIG.replace("value_1 = 1\n", "value_1 = 100\n").replace("value_17 = 17\n", "value_17 = 1700\n")
    assert config.read_text() == both

    panel = open_review(page)
    expect(panel.get_by_role("heading", name="Review changes")).to_be_focused()
    hunks = panel.locator(".review-file[data-path='config.py'] .review-hunk")
    expect(hunks).to_have_count(2)
    expect(hunks.nth(0).locator(".diff-add")).to_have_text("+value_1 = 100")
    expect(hunks.nth(0).locator(".diff-del")).to_have_text("-value_1 = 1")
    expect(hunks.nth(1).locator(".diff-add")).to_have_text("+value_17 = 1700")
    expect(hunks.nth(1).locator(".diff-hunk")).to_have_text("@@ -15,6 +15,6 @@")
    expect(panel.get_by_role("group", name="Change 2 in config.py")).to_be_visible()
    expect(panel.locator("#review-status")).to_have_text("2 changes to review in 1 file.")

    panel.get_by_role("button", name="Undo change 2 in config.py").click()
    expect(hunks).to_have_count(1)  # listed again after the undo
    assert config.read_text() == CONFIG.replace("value_1 = 1\n", "value_1 = 100\n")
    expect(hunks.locator(".diff-add")).to_have_text("+value_1 = 100")
    expect(panel.get_by_role("button", name="Undo change 2 in config.py")).to_have_count(0)
    expect(panel.get_by_role("button", name="Undo change 1 in config.py")).to_be_focused()
    expect(panel.locator("#review-status")).to_have_text(re.compile(r"^Undid change 2 in config\.py\. 1 change to review"))
    expect(page.locator(".note.rewind")).to_contain_text("Undid change 2 in config.py")
    [undo] = review_sent(sent)
    listed = [m for m in sent if m.get("method") == "composer/turnChanges"]
    assert len(listed) == 2 and listed[0]["params"]["sessionId"] == undo["sessionId"]
    assert [(p["path"], p["index"]) for p in undo["undo"]] == [("config.py", 1)] and "keep" not in undo
    assert len(undo["undo"][0]["digest"]) == 16

    keep = panel.get_by_role("button", name="Keep change 1 in config.py")
    keep.focus()
    page.keyboard.press("Enter")  # the keyboard works it
    expect(hunks).to_have_attribute("data-kept", "true")
    expect(hunks.locator(".review-kept")).to_have_text("Kept")
    expect(keep).to_be_disabled()
    expect(panel.get_by_role("button", name="Undo change 1 in config.py")).to_be_disabled()
    expect(panel.get_by_role("button", name="Keep all")).to_be_hidden()
    expect(panel.locator("#review-status")).to_have_text("All 1 change kept.")
    expect(panel.get_by_role("heading", name="Review changes")).to_be_focused()
    _, kept = review_sent(sent)
    assert [(p["path"], p["index"]) for p in kept["keep"]] == [("config.py", 0)] and "undo" not in kept
    assert config.read_text() == CONFIG.replace("value_1 = 1\n", "value_1 = 100\n")  # keeping changes nothing

    page.keyboard.press("Escape")  # closes the panel, focus back on its button
    expect(panel).to_be_hidden()
    expect(page.get_by_role("button", name="Review changes")).to_be_focused()


@needs_chromium
def test_review_shows_a_refusal_and_a_binary_file_and_keeps_all(page, server: Server, sent: list[dict]) -> None:
    from playwright.sync_api import expect

    config = server.workspace / "config.py"
    config.write_text(CONFIG)
    command = "printf 'a\\000b\\377' > blob.bin"
    server.model.script = [[{"text": "", "tool_calls": [*TWO_EDITS, {"name": "run_terminal", "arguments": {"command": command}}]},
                            {"text": "Changed both, made a blob."}]]
    run_turn(page, "change values 1 and 17, make a blob")
    page.locator('.permission button[data-option-id="allow_once"]').click()  # agent mode asks about the command
    expect(page.locator(".note.turn-end")).to_have_attribute("data-stop-reason", "end_turn")
    assert (server.workspace / "blob.bin").read_bytes() == b"a\x00b\xff"

    panel = open_review(page)
    blob = panel.locator(".review-file[data-path='blob.bin']")
    expect(blob.locator(".review-note")).to_contain_text("only \u201CUndo last turn\u201D restores this file")
    expect(blob.locator(".diff-tag")).to_have_text(" new file")
    expect(blob.locator(".review-hunk")).to_have_count(0)
    hunks = panel.locator(".review-file[data-path='config.py'] .review-hunk")
    expect(hunks).to_have_count(2)

    # the file moves on after it was listed: its undo is refused, untouched, and the reason shown
    moved = config.read_text().replace("value_17 = 1700", "value_17 = 1701")
    config.write_text(moved)
    panel.get_by_role("button", name="Undo change 2 in config.py").click()
    refused = panel.locator(".review-file[data-path='config.py'] .review-refused")
    expect(refused).to_contain_text("Not undone: ")
    expect(refused).to_contain_text("list them again")
    expect(hunks.nth(1).locator(".diff-add")).to_have_text("+value_17 = 1701")  # the new listing
    assert config.read_text() == moved

    # so is a keep: nothing marked kept, the reason shown, the file listed again
    moved = moved.replace("value_1 = 100", "value_1 = 101")
    config.write_text(moved)
    panel.get_by_role("button", name="Keep change 1 in config.py").click()
    expect(refused).to_contain_text("Not kept: ")
    expect(refused).to_contain_text("list them again")
    expect(hunks.nth(0).locator(".diff-add")).to_have_text("+value_1 = 101")  # the new listing
    expect(panel.locator("#review-status")).to_have_text(
        re.compile(r"^Did not keep change 1 in config\.py\. 2 changes to review in 2 files\.$"))
    expect(hunks.nth(0)).to_have_attribute("data-kept", "false")
    expect(panel.locator(".review-kept")).to_have_count(0)
    expect(panel.get_by_role("button", name="Keep change 1 in config.py")).to_be_enabled()
    assert len([m for m in sent if m.get("method") == "composer/turnChanges"]) == 3
    assert config.read_text() == moved

    panel.get_by_role("button", name="Keep all").click()
    expect(hunks.locator(".review-kept")).to_have_text(["Kept", "Kept"])
    expect(refused).to_have_count(0)
    expect(panel.locator("button.review-undo")).to_have_count(2)
    for button in panel.locator("button.review-undo, button.review-keep").all():
        expect(button).to_be_disabled()
    _, refused_keep, kept = review_sent(sent)
    assert [(p["path"], p["index"]) for p in refused_keep["keep"]] == [("config.py", 0)]
    assert [(p["path"], p["index"]) for p in kept["keep"]] == [("config.py", 0), ("config.py", 1)]
    assert "+value_17 = 1701" in hunks.nth(1).inner_text() and config.read_text() == moved

    # Undo last turn still restores everything, the binary file included, and closes the review
    page.click("#undo")
    expect(page.locator(".note.rewind").last).to_contain_text("restored checkpoint")
    expect(panel).to_be_hidden()
    assert config.read_text() == CONFIG and not (server.workspace / "blob.bin").exists()


@needs_chromium
def test_review_changes_after_a_reload(page, server: Server) -> None:
    from playwright.sync_api import expect

    config = server.workspace / "config.py"
    config.write_text(CONFIG)
    server.model.script = [[{"text": "", "tool_calls": TWO_EDITS}, {"text": "Changed both."}],
                           [{"text": "Nothing to change."}]]
    run_turn(page, "change values 1 and 17")
    expect(page.locator(".note.turn-end")).to_have_attribute("data-stop-reason", "end_turn")

    # the reloaded page never saw the turn end, but the session still has the turn's checkpoint
    page.reload()
    expect(page.locator("#connection")).to_have_attribute("data-state", "connected")
    expect(page.locator(".message.agent").last).to_contain_text("Changed both.")
    panel = open_review(page)
    hunks = panel.locator(".review-file[data-path='config.py'] .review-hunk")
    expect(hunks).to_have_count(2)
    panel.get_by_role("button", name="Undo change 1 in config.py").click()
    expect(hunks).to_have_count(1)
    assert config.read_text() == CONFIG.replace("value_17 = 17\n", "value_17 = 1700\n")

    # a turn that changed nothing leaves nothing to review: the panel says why
    run_turn(page, "change nothing")
    expect(panel).to_be_hidden()  # a turn closes the review
    expect(page.locator(".message.agent").last).to_contain_text("Nothing to change.")
    expect(page.locator("#send")).to_be_enabled()
    button = page.get_by_role("button", name="Review changes")
    expect(button).to_be_enabled()
    button.click()
    expect(panel).to_be_visible()
    expect(panel.locator("#review-status")).to_contain_text("Could not list the changes: ")
    expect(panel.locator("#review-status")).to_contain_text("no checkpoint")
    expect(panel.locator(".review-file")).to_have_count(0)


@needs_chromium
def test_rejecting_the_diff_leaves_the_file_alone(page, server: Server) -> None:
    from playwright.sync_api import expect

    hello = server.workspace / "hello.py"
    card = ask_for_the_edit(page)
    card.locator('button[data-option-id="reject_once"]').click()
    expect(card).to_have_attribute("data-outcome", "reject_once")
    expect(page.locator(".tool-call")).to_have_attribute("data-status", "failed")
    expect(page.locator(".note.turn-end")).to_have_attribute("data-stop-reason", "end_turn")
    expect(page.locator("#cancel")).to_be_hidden()
    assert hello.read_text() == GREETING
    assert len(server.model.requests) == 2  # the model heard about the refusal and answered


@needs_chromium
def test_cancel_while_asked_stops_the_turn(page, server: Server) -> None:
    from playwright.sync_api import expect

    card = ask_for_the_edit(page)
    page.click("#cancel")
    expect(card).to_have_attribute("data-outcome", "cancelled")
    expect(page.locator(".note.turn-end")).to_have_attribute("data-stop-reason", "cancelled")
    expect(page.locator("#cancel")).to_be_hidden()
    expect(page.locator("#send")).to_be_visible()
    assert (server.workspace / "hello.py").read_text() == GREETING


@needs_chromium
@pytest.mark.parametrize("server", [("bwrap", "unshare")], indirect=True)
def test_without_bubblewrap_the_page_warns_and_asks_before_every_command(page, server: Server) -> None:
    from playwright.sync_api import expect

    command = "echo made > made.txt"  # the agent-mode rules allow it: asked because of the sandbox
    server.model.script = [[{"text": "", "tool_calls": [{"name": "run_terminal", "arguments": {"command": command}}]},
                            {"text": "Stopped."}]]
    expect(page.locator("#connection")).to_have_attribute("data-state", "connected")
    badge = page.locator("#isolation")
    expect(badge).to_have_text("Sandbox: none (weaker than bubblewrap)")
    expect(badge).to_have_attribute("data-weaker", "true")
    assert "allow_unsandboxed = true" in badge.get_attribute("title")
    expect(page.locator("#toasts")).to_contain_text("weaker than bubblewrap")  # the server's showMessage
    page.fill("#prompt", "make a file")
    page.press("#prompt", "Enter")
    card = page.locator(".permission")
    expect(card.locator(".permission-input")).to_have_text(f"$ {command}")
    expect(card.locator(".permission-warning")).to_contain_text("sandbox isolation 'none', weaker than bubblewrap")
    expect(card.locator("button[data-kind]")).to_have_count(3)
    expect(card.locator('button[data-kind="allow_always"]')).to_have_count(0)
    card.locator('button[data-option-id="reject_once"]').click()
    expect(page.locator(".note.turn-end")).to_have_attribute("data-stop-reason", "end_turn")
    assert not (server.workspace / "made.txt").exists()


def test_websocket_needs_the_token_and_its_own_origin(server: Server) -> None:
    # A thread of its own: the module's sync Playwright keeps an event loop running on this one.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _check_refusals(server)).result(60)


async def _check_refusals(server: Server) -> None:
    base = f"http://127.0.0.1:{server.port}"
    rpc = f"ws://127.0.0.1:{server.port}/rpc"
    own = {"Origin": base}
    async with aiohttp.ClientSession() as http:
        for url, headers, status in [
            (rpc, own, 401),
            (f"{rpc}?token=wrong{server.token}", own, 401),
            (f"{rpc}?token={server.token}", {"Origin": "http://evil.example"}, 403),
            (f"{rpc}?token={server.token}", {"Origin": f"http://localhost:{server.port}"}, 403),
        ]:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(url, headers=headers)
            assert refused.value.status == status, (url, headers)

        async with http.get(f"{base}/static/app.js") as r:
            assert r.status == 401
        async with http.get(f"{base}/?token={server.token}") as r:
            assert r.status == 200 and "static/app.js" in await r.text()

        async with http.ws_connect(f"{rpc}?token={server.token}", headers=own) as ws:
            await ws.send_str(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "processId": None, "rootUri": None, "capabilities": {}, "clientInfo": {"name": "composer-web"}}}))
            reply = {}
            while "id" not in reply:  # notifications (window/logMessage) may come first
                reply = json.loads((await ws.receive(timeout=20)).data)
            assert reply["id"] == 1 and "serverInfo" in reply["result"], reply
