"""Editable diff review (agent/review.py): the person's text of an accepted edit reaches the file,
merged with what changed while they reviewed, or refused without writing when both changed the
same lines; the model is told the difference; a refusal or an unchanged text changes nothing."""

from __future__ import annotations

from agent.loop import Agent
from agent.permissions import PermissionPolicy
from agent.policy import Reply
from agent.review import Reviewed, merge3
from agent.session_log import SessionLog, read_session
from agent.tools.base import ToolContext, ToolRegistry
from agent.tools.files import file_tools
from agent.workspace import Workspace
from model.toolcalls import ToolCall
from tests.agent.test_loop import ScriptedPolicy

BASE = "def area(w, h):\n    return w + h\n\n\ndef name():\n    return 'box'\n"
EDIT = ToolCall("edit_file", {"path": "shape.py", "old_string": "return w + h", "new_string": "return w * h"})


def test_merge_keeps_both_sides_changes_of_different_lines():
    base = "a\nb\nc\nd\ne\n"
    assert merge3(base, "a\nB\nc\nd\ne\n", "a\nb\nc\nd\nE\n") == "a\nB\nc\nd\nE\n"
    assert merge3(base, "z\na\nb\nc\nd\ne\n", "a\nb\nc\ne\n") == "z\na\nb\nc\ne\n"  # insert and delete


def test_merge_refuses_changes_of_the_same_lines_and_agrees_with_identical_ones():
    base = "a\nb\nc\n"
    assert merge3(base, "a\nX\nc\n", "a\nY\nc\n") is None
    assert merge3(base, "a\nX\nc\n", "a\nX\nc\n") == "a\nX\nc\n"
    assert merge3(base, "a\nnew\nb\nc\n", "a\nother\nb\nc\n") is None  # two insertions at one point
    assert merge3(base, "a\nb\nc", "A\nb\nc\n") == "A\nb\nc"  # a last line without its newline


def _agent(tmp_path, reply, replies=None, log=None):
    (tmp_path / "shape.py").write_text(BASE)
    asked: list[dict] = []

    async def person(tool_call, decision):
        asked.append(tool_call)
        return reply(tool_call) if callable(reply) else reply

    policy = ScriptedPolicy(replies or [Reply("", [EDIT], "tool_calls")])
    agent = Agent(policy, ToolRegistry(file_tools()), ToolContext(Workspace(tmp_path)), system="sys",
                  permissions=PermissionPolicy(default="ask"), ask=person, log=log)
    return agent, policy, asked


def _told(policy) -> str:
    return [m for m in policy.seen[-1] if m["role"] == "tool"][-1]["content"]


async def test_the_person_s_text_is_written_and_the_model_told_how_it_differs(tmp_path):
    revised = BASE.replace("return w + h", "return abs(w * h)")
    log = SessionLog.open(tmp_path, model={"id": "scripted"}, sampler={}, tools=[], system_prompt="sys",
                          log_dir=tmp_path / "logs")
    agent, policy, asked = _agent(tmp_path, Reviewed("allow_once", revised), log=log)
    await agent.run_turn("fix area")
    log.close()
    assert (tmp_path / "shape.py").read_text() == revised
    assert asked[0]["content"][0]["newText"] == BASE.replace("w + h", "w * h")
    told = _told(policy)
    assert "The user changed your proposed edit" in told
    assert "-    return w * h" in told and "+    return abs(w * h)" in told
    records = read_session(log.path)
    [permission] = [r for r in records if r["type"] == "permission"]
    [call] = [r for r in records if r["type"] == "tool_call"]
    assert permission["revised"] is True and permission["outcome"] == "allow_once"
    assert "+    return abs(w * h)" in call["data"]["user_diff"] and call["status"] == "completed"
    assert call["data"]["corrected_call"] == {"name": "edit_file", "arguments": {
        "path": "shape.py", "old_string": "    return w + h", "new_string": "    return abs(w * h)"}}


async def test_a_change_made_while_the_person_reviewed_is_kept(tmp_path):
    def typed_elsewhere_then_allowed(tool_call):
        (tmp_path / "shape.py").write_text(BASE.replace("'box'", "'square'"))
        return Reviewed("allow_once", BASE.replace("return w + h", "return w * h  # area"))

    agent, policy, _ = _agent(tmp_path, typed_elsewhere_then_allowed)
    await agent.run_turn("fix area")
    assert (tmp_path / "shape.py").read_text() == BASE.replace("return w + h", "return w * h  # area").replace(
        "'box'", "'square'")
    assert "merged with changes made to the file" in _told(policy)


async def test_a_revision_that_clashes_with_a_change_meanwhile_writes_nothing(tmp_path):
    theirs = BASE.replace("return w + h", "return w - h")

    def changed_the_same_line_then_allowed(tool_call):
        (tmp_path / "shape.py").write_text(theirs)
        return Reviewed("allow_once", BASE.replace("return w + h", "return w * h  # area"))

    agent, policy, _ = _agent(tmp_path, changed_the_same_line_then_allowed)
    await agent.run_turn("fix area")
    assert (tmp_path / "shape.py").read_text() == theirs
    told = _told(policy)
    assert "nothing was written" in told and "+    return w * h  # area" in told


async def test_a_refusal_or_an_unchanged_proposal_ignores_the_revised_text(tmp_path):
    agent, policy, _ = _agent(tmp_path, Reviewed("reject_once", "anything\n"))
    await agent.run_turn("fix area")
    assert (tmp_path / "shape.py").read_text() == BASE
    assert "did not allow" in _told(policy)

    proposed = BASE.replace("w + h", "w * h")
    agent, policy, _ = _agent(tmp_path, Reviewed("allow_once", proposed.replace("\n", "\r\n")))
    await agent.run_turn("fix area")
    assert (tmp_path / "shape.py").read_text() == proposed
    assert _told(policy).startswith("Edited shape.py")  # the model's own call ran


async def test_a_new_file_can_be_revised_before_it_is_created(tmp_path):
    write = ToolCall("write_file", {"path": "notes.md", "content": "todo\n"})
    agent, policy, asked = _agent(tmp_path, Reviewed("allow_once", "# Notes\ntodo\n"),
                                  replies=[Reply("", [write], "tool_calls")])
    await agent.run_turn("write notes")
    assert asked[0]["content"][0]["oldText"] is None
    assert (tmp_path / "notes.md").read_text() == "# Notes\ntodo\n"
    assert "+# Notes" in _told(policy)


def test_a_change_both_sides_made_beside_equal_lines_is_a_clash_not_written_twice():
    # the same blank line inserted by each side, aligned differently by the diff
    assert merge3("b\na\n", "b\nb\na\n", "b\nb\nEXTRA\na\n") is None
    # one of two blank lines deleted by each side: agreed on, or refused, never deleted twice
    assert merge3("a\n\n\nb\n", "a\n\nb\n", "a\n\nB\n") in ("a\n\nB\n", None)
    assert merge3("x\n\ny\n", "x\ny\n", "x\ny\n# z\n") == "x\ny\n# z\n"  # the same deletion, then apart
    assert merge3("a\n\n\nb\nc\nd\ne\n", "a\n\n\nb\nc\nd\nE\n", "a\n\n\n\nb\nc\nd\ne\n") == "a\n\n\n\nb\nc\nd\nE\n"


def test_lines_the_person_left_alone_keep_their_line_breaks():
    from agent.review import Revision

    class Root:
        def relative(self, path):
            return path

    mixed = "a = 1\nb = 2\r\nc = 3\n"
    proposal = {"content": [{"type": "diff", "path": "m.py", "oldText": mixed, "newText": mixed.replace("3", "4")}]}
    revision = Revision.of("edit_file", proposal, "a = 1\r\nb = 2\r\nc = 5\r\n", Root())
    assert revision.revised == "a = 1\nb = 2\r\nc = 5\r\n"
    crlf = {"content": [{"type": "diff", "path": "w.py", "oldText": "a\r\n", "newText": "b\r\n"}]}
    assert Revision.of("edit_file", crlf, "c\n", Root()).revised == "c\r\n"
    assert Revision.of("edit_file", crlf, "b\n", Root()) is None  # only the breaks differ: no revision


async def test_a_revision_the_editor_refuses_fails_the_call_not_the_turn(tmp_path):
    class Refusing:
        async def apply(self, path, old_text, new_text, version):
            return False

    agent, policy, _ = _agent(tmp_path, Reviewed("allow_once", BASE.replace("w + h", "w * h * 1")),
                              replies=[Reply("", [EDIT], "tool_calls"), Reply("I see.", [], "stop")])
    agent.ctx.workspace.edit_sink = Refusing()
    agent.ctx.workspace.set_buffer("shape.py", BASE, 1)
    result = await agent.run_turn("fix area")
    assert result.stop_reason == "end_turn" and "refused" in _told(policy)
    assert (tmp_path / "shape.py").read_text() == BASE


def test_a_revision_of_the_file_as_it_now_is_merges_to_itself_or_is_refused():
    # the person revised the text the file has now (X) by one more line: whatever the diff's
    # alignment of X's own changes, the merge is their text or a refusal (git: a conflict)
    import random

    rng = random.Random(0)
    for _ in range(3000):
        base = [rng.choice("ab\n") for _ in range(rng.randint(0, 6))]
        now = list(base)
        for _ in range(rng.randint(1, 2)):
            at = rng.randint(0, len(now))
            if now and rng.random() < 0.4:
                del now[min(at, len(now) - 1)]
            else:
                now.insert(at, rng.choice("ab\n"))
        revised = list(now)
        revised.insert(rng.randint(0, len(now)), "EXTRA")
        b, x, r = ("".join(f"{c.strip()}\n" for c in t) for t in (base, now, revised))
        assert merge3(b, x, r) in (r, None), (b, x, r)


def test_the_corrected_call_writes_the_person_s_version_from_what_the_model_saw():
    import random

    from agent.review import Revision, corrected_call

    rng = random.Random(1)
    for _ in range(500):
        base = "".join(rng.choice(["x = 1\n", "y = 2\n", "\n", "z = 3\n"]) for _ in range(rng.randint(1, 8)))
        lines = base.splitlines(keepends=True)
        at = rng.randrange(len(lines) + 1)
        revised = "".join([*lines[:at], rng.choice(["x = 9\n", "w = 0\n"]), *lines[at + rng.randint(0, 1):]])
        if revised == base:
            continue
        call = corrected_call(Revision("edit_file", "f.py", base, base, revised))
        args = call["arguments"]
        if call["name"] == "write_file":  # only when no quote of the file is unique
            assert args["content"] == revised
            continue
        assert base.find(args["old_string"]) == base.rfind(args["old_string"]), (base, revised, call)
        assert base.replace(args["old_string"], args["new_string"], 1) == revised, (base, revised, call)
    emptied = corrected_call(Revision("edit_file", "new.py", None, "x = 1\n", ""))
    assert emptied == {"name": "write_file", "arguments": {"path": "new.py", "content": ""}}  # never an "identical" edit
