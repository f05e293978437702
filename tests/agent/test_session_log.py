"""Session logs: every record type validates against the shipped schema, files are append-only
and survive torn lines, the directory layout follows the env vars, and secrets are redacted
while ordinary code is not."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from agent.redact import redact, redact_obj
from agent.session_log import (
    RECORD_TYPES,
    SCHEMA_PATH,
    SCHEMA_VERSION,
    SessionLog,
    SessionLogError,
    SessionLogWarning,
    default_log_dir,
    list_sessions,
    read_session,
    validate_record,
    workspace_slug,
)

VALIDATOR = Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]

EXAMPLES: dict[str, dict] = {
    "user_message": {"text": "fix the failing test", "attachments": [{"type": "resource_link", "uri": "file:///a.py"}]},
    "model_call": {
        "call_id": "m1", "parent": None, "prefix_len": 0, "prefix_break": None, "turn": 0, "weight_version": 7,
        "prompt_token_ids": [1, 2, 3], "completion_token_ids": [4, 5], "logprobs": [-0.1, -2.5], "forced": [0, 1],
        "sampler": {"temperature": 1.0, "top_p": 0.95, "seed": 1234},
        "routed_experts": [[[0, 3], [1, 2]], [[4, 5], [6, 7]]], "routed_experts_start": 0,
        "text": "Let me read it.", "reasoning": "the test imports a.py", "finish_reason": "tool_calls",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"a.py\"}"}}],
        "timing": {"ttft_s": 0.05, "total_s": 0.4, "tokens_per_s": 120.0},
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        "malformed_tool_calls": [{"index": 1, "message": "tool call 2 is not valid JSON", "raw": "<tool_call>{</tool_call>"}],
        "harness_message": "[harness] tool call 2 is not valid JSON. Nothing was run for it",
    },
    "tool_call": {"call_id": "c1", "model_call_id": "m1", "name": "read_file", "arguments": {"path": "a.py"},
                  "result": "def f(): ...", "error": None, "status": "completed", "duration_s": 0.002,
                  "group": "g1", "data": {"lines": 1}},
    "permission": {"call_id": "c2", "tool": "terminal", "arguments": {"command": "rm -rf build"},
                   "decision": "allow", "outcome": "allow_once", "by": "user", "option_id": "ok"},
    "edit_review": {"call_id": "c3", "path": "a.py", "hunk": 0, "accepted": False, "by": "user", "reason": "wrong fix"},
    "checkpoint": {"checkpoint_id": "0001-abc", "label": "before edit_file", "files": 12, "new_bytes": 300},
    "restore": {"checkpoint_id": "0001-abc", "backup_id": "0002-def",
                "changes": {"added": [], "modified": ["a.py"], "deleted": ["b.py"]}, "by": "user"},
    "forget": {"by": "user", "forgot_turn": True},
    "final_diff": {"diff": "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x\n+y\n", "files": ["a.py"],
                   "base_checkpoint_id": "0001-abc", "base_commit": None},
    "outcome": {"signal": "tests_passed", "value": True, "source": "pytest", "detail": {"passed": 3, "failed": 0}},
    "error": {"message": "policy server unreachable", "kind": "ConnectionError", "where": "model_call", "fatal": False},
    "cancelled": {"reason": "user pressed stop", "by": "user", "step": 2},
}


def open_log(workspace: Path, log_dir: Path, **kwargs) -> SessionLog:
    return SessionLog.open(workspace, model={"id": "composer-mini", "weight_version": 7, "backend": "engine"},
                           sampler={"temperature": 1.0, "top_p": 1.0, "max_tokens": 1024, "seed": 0},
                           tools=TOOLS, system_prompt="You are Composer.", log_dir=log_dir, client="rollout",
                           **kwargs)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "my project"
    ws.mkdir()
    return ws


def test_every_record_type_validates_and_round_trips(workspace: Path, tmp_path: Path, real_tokenizer) -> None:
    with open_log(workspace, tmp_path / "logs", task_id="django-123", tokenizer=real_tokenizer) as log:
        written = [log.write(kind, **fields) for kind, fields in EXAMPLES.items()]
    records = read_session(log.path)
    assert [r["type"] for r in records] == list(RECORD_TYPES)
    assert records[1:] == written
    for record in records:
        VALIDATOR.validate(record)
    assert [r["seq"] for r in records] == list(range(len(RECORD_TYPES)))
    assert {r["session_id"] for r in records} == {log.session_id}
    assert {r["version"] for r in records} == {SCHEMA_VERSION}
    times = [r["time"] for r in records]
    assert times == sorted(times)
    header = records[0]
    assert header["workspace"] == str(workspace.resolve()) and header["git"] is None
    assert header["system_prompt_hash"].startswith("sha256:") and header["tools"] == TOOLS


@pytest.mark.parametrize(("kind", "fields", "problem"), [
    ("tool_call", {"call_id": "c", "name": "x", "arguments": {}, "result": "", "error": None, "duration_s": 0},
     "'group' is a required property"),
    ("outcome", {"signal": "tests_passed", "value": True, "colour": "red"}, "colour"),
    ("model_call", {**EXAMPLES["model_call"], "prompt_token_ids": ["a"]}, "prompt_token_ids"),
    ("model_call", {**EXAMPLES["model_call"], "logprobs": [-0.1]}, "1 logprobs for 2 completion tokens"),
    ("model_call", {**EXAMPLES["model_call"], "forced": [1]}, "1 forced for 2 completion tokens"),
    ("model_call", {k: v for k, v in EXAMPLES["model_call"].items() if k != "sampler"}, "'sampler' is a required"),
    ("model_call", {**EXAMPLES["model_call"], "prefix_break": {"reason": "whim"}}, "prefix_break"),
    ("permission", {**EXAMPLES["permission"], "decision": "maybe"}, "decision"),
    ("nonsense", {}, "unknown record type"),
])
def test_invalid_records_are_refused_and_not_written(workspace: Path, tmp_path: Path, kind: str,
                                                      fields: dict, problem: str, real_tokenizer) -> None:
    log = open_log(workspace, tmp_path / "logs", validate=True, tokenizer=real_tokenizer)
    size = log.path.stat().st_size
    with pytest.raises(SessionLogError, match=problem):
        log.write(kind, **fields)
    assert log.path.stat().st_size == size
    log.close()


def test_validation_is_on_under_pytest_and_a_bad_header_leaves_no_file(workspace: Path, tmp_path: Path) -> None:
    log = open_log(workspace, tmp_path / "logs")
    assert log.validate
    with pytest.raises(SessionLogError, match="set by the log"):
        log.write("user_message", text="x", seq=99)
    log.close()
    with pytest.raises(SessionLogError, match="model"):
        SessionLog.open(workspace, model={"name": "no id"}, sampler={}, tools=[], system_prompt="",
                        log_dir=tmp_path / "logs", session_id="bad")
    assert not (log.path.parent / "bad.jsonl").exists()


def test_log_dir_layout(workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COMPOSER_LOG_DIR", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_log_dir() == tmp_path / "home/.local/share/composer/sessions"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_log_dir() == tmp_path / "xdg/composer/sessions"
    monkeypatch.setenv("COMPOSER_LOG_DIR", str(tmp_path / "explicit"))
    log = open_log(workspace, None, session_id="s-1")
    log.close()
    assert log.path == tmp_path / "explicit" / workspace_slug(workspace) / "s-1.jsonl"
    assert workspace_slug(workspace).startswith("my-project-")
    other = tmp_path / "elsewhere" / "my project"
    assert workspace_slug(other) != workspace_slug(workspace)
    assert oct(log.path.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(SessionLogError, match="already exists"):
        open_log(workspace, None, session_id="s-1")
    with pytest.raises(SessionLogError, match="must be letters"):
        open_log(workspace, None, session_id="../escape")


def test_append_only_outcome_after_close_and_second_writer(workspace: Path, tmp_path: Path) -> None:
    log = open_log(workspace, tmp_path / "logs")
    log.write("user_message", text="hi")
    log.close()
    with pytest.raises(SessionLogError, match="closed"):
        log.write("user_message", text="again")
    before = log.path.read_bytes()
    later = SessionLog.reopen(log.path)
    assert later.session_id == log.session_id
    later.write("outcome", signal="edit_kept", value=True, source="editor")
    other = SessionLog.reopen(log.path)  # a second writer while the first is open
    other.write("outcome", signal="reward", value=0.75)
    later.write("outcome", signal="tests_passed", value=False)
    later.close()
    other.close()
    after = log.path.read_bytes()
    assert after.startswith(before)
    records = read_session(log.path)
    assert [r["type"] for r in records] == ["session", "user_message", "outcome", "outcome", "outcome"]
    assert [r["seq"] for r in records[:4]] == [0, 1, 2, 2 + 1]


def test_a_resting_log_holds_no_descriptor_and_reopens_on_write(workspace: Path, tmp_path: Path) -> None:
    log = open_log(workspace, tmp_path / "logs")
    fds = len(os.listdir("/proc/self/fd"))
    log.rest()
    assert len(os.listdir("/proc/self/fd")) == fds - 1 and not log.closed
    log.write("user_message", text="after a rest")  # reopened for appending, seq continues
    log.rest()
    log.rest()  # twice is harmless
    log.close()
    assert log.closed and len(os.listdir("/proc/self/fd")) == fds - 1
    with pytest.raises(SessionLogError, match="closed"):
        log.write("user_message", text="after close")
    assert [(r["type"], r["seq"]) for r in read_session(log.path)] == [("session", 0), ("user_message", 1)]
    gone = open_log(workspace, tmp_path / "logs")
    gone.rest()
    gone.path.unlink()
    with pytest.raises(SessionLogError, match="cannot be reopened"):  # never recreated headless
        gone.write("user_message", text="lost")
    assert not gone.path.exists()


def test_torn_last_line_is_skipped_and_later_appends_stay_readable(workspace: Path, tmp_path: Path) -> None:
    log = open_log(workspace, tmp_path / "logs")
    log.write("user_message", text="hi")
    log.close()
    with open(log.path, "ab") as f:
        f.write(b'{"type":"tool_call","version":1,"session_id":"x","seq":2,"na')  # the crash
    with pytest.warns(SessionLogWarning, match="torn last line"):
        assert [r["type"] for r in read_session(log.path)] == ["session", "user_message"]
    later = SessionLog.reopen(log.path)
    later.write("error", message="the agent crashed", fatal=True)
    later.close()
    with pytest.warns(SessionLogWarning, match="unreadable line"):
        records = read_session(log.path)
    assert [(r["type"], r["seq"]) for r in records] == [("session", 0), ("user_message", 1), ("error", 2)]


def test_long_tool_results_are_cut_with_a_note(workspace: Path, tmp_path: Path) -> None:
    log = open_log(workspace, tmp_path / "logs")
    result = "line of output\n" * 10_000
    record = log.write("tool_call", **{**EXAMPLES["tool_call"], "result": result})
    log.close()
    assert record["truncated"] and record["result_chars"] == len(result)
    assert len(record["result"]) < 51_000 and "[output truncated" in record["result"]


def test_records_are_redacted_strings_and_token_ids(workspace: Path, tmp_path: Path, real_tokenizer) -> None:
    key = "sk-proj-" + "Ab3dEf6hIj9kLmNoPqRsTuVwXyZ012345"
    tok = real_tokenizer
    log = open_log(workspace, tmp_path / "logs", tokenizer=tok)
    log.write("tool_call", **{**EXAMPLES["tool_call"], "result": f'OPENAI_API_KEY="{key}"\nx = 1\n'})
    log.write("tool_call", **{**EXAMPLES["tool_call"], "arguments": {"path": "config/.env"},
                              "result": "DATABASE_URL=postgres://app:pw@db/app\nDEBUG=true\nSECRET=abcdef\nNAME=plainword12\n"})
    prompt = tok.encode(f"<|im_start|>user\nread it: {key}<|im_end|>\n<|im_start|>assistant\n")
    completion = [*tok.encode("It says plainword12, nothing else."), tok.eos_token_id]
    routing = [[[p % 8, 7]] for p in range(len(prompt) + len(completion) - 1)]
    log.write("model_call", **{**EXAMPLES["model_call"], "text": f"the key is {key}", "prompt_token_ids": prompt,
                               "completion_token_ids": completion, "logprobs": [-1.0] * len(completion),
                               "forced": [0] * len(completion), "routed_experts": routing})
    log.write("checkpoint", checkpoint_id="AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCd", label="x")
    log.close()
    text = log.path.read_text()
    assert key not in text and text.count("[REDACTED:openai_key]") == 2
    records = read_session(log.path)
    assert records[1]["result"] == 'OPENAI_API_KEY="[REDACTED:openai_key]"\nx = 1\n'
    assert records[2]["result"] == ("DATABASE_URL=[REDACTED:env_value]\nDEBUG=true\n"
                                    "SECRET=[REDACTED:env_value]\nNAME=[REDACTED:env_value]\n")
    call = records[3]
    decoded = tok.decode(call["prompt_token_ids"]) + tok.decode(call["completion_token_ids"])
    assert key not in decoded and "[REDACTED:openai_key]" in decoded
    # The .env value the model repeats is known to the log: redacted where no pattern would see it.
    assert "plainword12" not in decoded and "It says [REDACTED:env_value], nothing else." in decoded
    [[a, b]] = call["redactions"]["prompt"]
    [[c, d]] = call["redactions"]["completion"]
    assert "[REDACTED:openai_key]" in tok.decode(call["prompt_token_ids"][a:b])
    # Outside the tags every id is the one the engine saw; per-token fields keep their alignment.
    cut = len(prompt) - len(call["prompt_token_ids"][b:])
    assert call["prompt_token_ids"][:a] == prompt[:a] and call["prompt_token_ids"][b:] == prompt[cut:]
    assert call["completion_token_ids"][:c] == completion[:c] and call["completion_token_ids"][-2:] == completion[-2:]
    assert len(call["logprobs"]) == len(call["completion_token_ids"]) == len(call["forced"])
    assert call["logprobs"][c:d] == [None] * (d - c) and call["logprobs"][:c] == [-1.0] * c
    assert call["routed_experts"] == routing[:a]  # routing after the first secret is not the logged tokens'
    assert records[4]["checkpoint_id"] == "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCd"


def test_a_log_without_a_tokenizer_withholds_token_ids(workspace: Path, tmp_path: Path) -> None:
    log = open_log(workspace, tmp_path / "logs")
    record = log.write("model_call", **EXAMPLES["model_call"])
    log.close()
    assert record["prompt_token_ids"] == record["completion_token_ids"] == [] and record["logprobs"] is None
    assert "tokenizer" in record["extra"]["ids_withheld"]


def test_non_finite_logprobs_become_null(workspace: Path, tmp_path: Path, real_tokenizer) -> None:
    log = open_log(workspace, tmp_path / "logs", tokenizer=real_tokenizer)
    log.write("model_call", **{**EXAMPLES["model_call"], "logprobs": [float("-inf"), -1.0]})
    log.close()
    assert read_session(log.path)[1]["logprobs"] == [None, -1.0]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_header_records_the_git_commit(workspace: Path, tmp_path: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(workspace), *args], check=True, capture_output=True,
                              text=True, env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                                              "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
                                              "PATH": "/usr/bin:/bin"}).stdout.strip()

    git("init", "-q", "-b", "main")
    (workspace / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("commit", "-q", "-m", "init")
    (workspace / "a.py").write_text("x = 2\n")
    with open_log(workspace, tmp_path / "logs") as log:
        pass
    assert read_session(log.path)[0]["git"] == {"commit": git("rev-parse", "HEAD"), "branch": "main", "dirty": True}


def test_list_sessions(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = open_log(tmp_path / "a", logs, session_id="1")
    second = open_log(tmp_path / "b", logs, session_id="2")
    third = open_log(tmp_path / "a", logs, session_id="3")
    for log in (first, second, third):
        log.close()
    (logs / workspace_slug(tmp_path / "a") / "4.jsonl").write_bytes(b'{"type":"sess')  # torn header
    assert [s.session_id for s in list_sessions(tmp_path / "a", logs)] == ["4", "1", "3"]
    everything = list_sessions(log_dir=logs)
    assert {s.session_id for s in everything} == {"1", "2", "3", "4"}
    info = next(s for s in everything if s.session_id == "2")
    assert info.workspace == str((tmp_path / "b").resolve()) and info.model == "composer-mini"
    assert list_sessions(tmp_path / "nowhere", logs) == []


# ---- redaction --------------------------------------------------------------------------------

SECRETS = [
    ("openai", "sk-proj-Ab3dEf6hIj9kLmNoPqRsTuVwXyZ0123456789_abcDEF", "export OPENAI_API_KEY={}"),
    ("openai legacy", "sk-Ab3dEf6hIj9kLmNoPqRsTuVwXyZ0123456789abcdEFGH", "client = OpenAI(api_key='{}')"),
    ("anthropic", "sk-ant-api03-Ab3dEf6hIj9kLmNoPqRsTuVwXyZ0123456789", "{}"),
    ("github", "ghp_Ab3dEf6hIj9kLmNoPqRsTuVwXyZ0123456789", "git clone https://{}@github.com/o/r"),
    ("github fine-grained", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123", "GH={}"),
    ("aws key id", "AKIAIOSFODNN7EXAMPLE", "aws_access_key_id = {}"),
    ("aws secret", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key = {}"),
    ("slack", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "SLACK_TOKEN: {}"),
    ("slack webhook", "https://hooks.slack.com/services/T000/B000/XXXXXXXX", "url = '{}'"),
    ("google", "AIzaSyA1234567890abcdefghijklmnopqrstuv", "key={}"),
    ("stripe", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe.api_key = {}"),
    ("huggingface", "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh", "HF_TOKEN={}"),
    ("gitlab", "glpat-Ab3dEf6hIj9kLmNoPqRs", "{}"),
    ("npm", "npm_Ab3dEf6hIj9kLmNoPqRsTuVwXyZ0123456789", "//registry.npmjs.org/:_authToken={}"),
    ("jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "Cookie: session={}"),
    ("bearer", "abcDEF123456ghiJKL789", "curl -H 'Authorization: Bearer {}' https://api"),
    ("basic", "dXNlcjpwYXNzd29yZDEyMw==", "Authorization: Basic {}"),
    ("url password", "s3cr3t-pass", "DATABASE_URL=postgres://admin:{}@db.internal:5432/app"),
    ("password literal", "hunter2!", 'password = "{}"'),
    ("json secret", "abcdef", '{{"client_secret": "{}", "x": 1}}'),
    ("yaml password", "Tr0ub4dor&3", "  password: {}"),
    ("env password", "hunter2", "DB_PASSWORD={}"),
    ("cli flag", "p4ssw0rd", "mysql --password={} -u root"),
    ("query token", "abc123def456", "GET /cb?access_token={}&state=1"),
    ("camel key", "abcd1234", 'const apiKey = "{}";'),
    ("unknown vendor", "Qm9hcmQxMjM0NTY3ODkwQWJDZEVmR2hJaktsTW5PcA", "value: {}"),
]


@pytest.mark.parametrize(("name", "secret", "template"), SECRETS, ids=[s[0] for s in SECRETS])
def test_secret_shapes_are_redacted(name: str, secret: str, template: str) -> None:
    text = template.format(secret)
    out = redact(text)
    assert secret not in out and "[REDACTED:" in out, out
    assert redact(out) == out  # idempotent


def test_private_keys_are_redacted_whole() -> None:
    for label in ("RSA PRIVATE KEY", "OPENSSH PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "PGP PRIVATE KEY BLOCK"):
        body = "MIIEowIBAAKCAQEA1b2c3d4\nq8r9s0t1u2v3w4x5y6z7\n"
        text = f"key:\n-----BEGIN {label}-----\n{body}-----END {label}-----\nafter\n"
        assert redact(text) == "key:\n[REDACTED:private_key]\nafter\n"
    assert "q8r9s0" not in redact("-----BEGIN RSA PRIVATE KEY-----\nq8r9s0t1u2v3w4x5 (cut off)")


NORMAL_CODE = [
    "def get_token(self) -> str:\n    return self._token\n",
    "token = tokens[i]\npassword_hash = hashlib.sha256(password.encode()).hexdigest()\n",
    'headers = {"Authorization": f"Bearer {token}"}\n',
    "max_tokens=1024, num_tokens = 512, token_limit = 4096\n",
    "author = 'Jane Doe'\ntokenizer = AutoTokenizer.from_pretrained(name)\n",
    "password: str = field(default='')\napi_key: Optional[str] = None\n",
    "if password is None:\n    password = getpass.getpass()\n",
    'kwargs["token"] = token\nclient(api_key=api_key, auth=auth)\n',
    "sha = 3f786850e387550fdab836ed7e6dc881de23001b\nid = 550e8400-e29b-41d4-a716-446655440000\n",
    "commit 0123456789abcdef0123456789abcdef01234567\nsha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n",
    'password = ""\nsecret = "<your secret here>"\napi_key = "${API_KEY}"\ntoken = None\n',
    "https://example.com/docs/getting-started?page=2&lang=en\n",
    "self.token = token2\nfor i, token in enumerate(tokens):\n",
    "the secret sauce is tests; no tokens were harmed\n",
    "test_checkpoint_restore_after_rm_rf_of_subtree_with_symlinks_and_modes\n",
]


@pytest.mark.parametrize("code", NORMAL_CODE)
def test_normal_code_is_not_redacted(code: str) -> None:
    assert redact(code) == code


WORDS = ["get", "set", "token", "tokens", "password", "secret", "key", "auth", "author", "user",
         "name", "value", "count", "limit", "parse", "config", "client", "request", "response", "file",
         "path", "index", "batch", "layer", "model", "cache", "hash", "checkpoint", "restore", "session"]
identifier = st.builds(
    lambda words, style, suffix: (
        "_".join(words) if style == "snake" else words[0] + "".join(w.title() for w in words[1:])
        if style == "camel" else "".join(w.title() for w in words)) + suffix,
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
    st.sampled_from(["snake", "camel", "pascal"]),
    st.sampled_from(["", "", "2", "_v1", "42"]),
)
CODE_TEMPLATES = ["{a} = {b}", "{a} = {b}({c})", "def {a}(self, {b}, {c}=None):", "{a}.{b}[{c}]",
                  "return {a}", "{a}({b}={c})", '"{a}": {b},', "{a}: {B}", "if {a} is None: {b} = {c}",
                  "for {a} in {b}:", "{a} = self.{b}.{c}", "import {a}", "{a}_{b} = {c}({a})"]


@settings(max_examples=300, deadline=None)
@given(a=identifier, b=identifier, c=identifier, template=st.sampled_from(CODE_TEMPLATES))
def test_identifier_like_code_is_never_redacted(a: str, b: str, c: str, template: str) -> None:
    code = template.format(a=a, b=b, c=c, B=b[:1].upper() + b[1:])
    assert redact(code) == code


def test_redact_obj_keys_and_skips() -> None:
    record = {"session_id": "sk-proj-Ab3dEf6hIj9kLmNoPqRsTuVwXyZ012345", "password": "hunter2",
              "token_count": "5", "args": {"env": ["X=1", "ghp_Ab3dEf6hIj9kLmNoPqRsTuVwXyZ0123456789"]}, "n": 3}
    out = redact_obj(record, skip_keys={"session_id"})
    assert out == {"session_id": record["session_id"], "password": "[REDACTED:password]", "token_count": "5",
                   "args": {"env": ["X=1", "[REDACTED:github_token]"]}, "n": 3}


def test_validate_record_rejects_unknown_fields() -> None:
    base = {"type": "cancelled", "version": 1, "session_id": "s", "seq": 0, "time": 1.0}
    validate_record(base)
    with pytest.raises(SessionLogError, match="Unevaluated properties"):
        validate_record({**base, "surprise": 1})
