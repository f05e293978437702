"""A session: one conversation with the agent over one workspace, with everything it needs
wired together: the policy (in-process engine or an endpoint), the tool registry, permissions,
checkpoints, the session log and the event sink. The language server, the ACP agent, the CLI
and RL rollouts all drive the agent through this class.

    session = await Session.create(SessionConfig(workspace=root), events=sink)
    result = await session.prompt("add a test for parse()")   # session.cancel() stops it
    await session.restore(session.last_checkpoint)             # undo the turn: shell, unsaved buffers
    session.close()

The log gets the editor's outcome signals (agent/outcomes.py) where they become known: review
verdicts and the agent's tests after its last edit when a turn ends, `turn_undone` at a restore,
and the previous session's kept/reverted edits when a new session starts in the workspace.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.buffer_rewind import BufferRewind, rewind_buffers
from agent.checkpoint_records import Changes, RestoreResult
from agent.checkpoints import CheckpointStore
from agent.harness_notes import rewind_note, undo_note
from agent.isolation import gate_session
from agent.loop import Agent, LoopConfig, TurnResult
from agent.outcomes import (
    forget_signal,
    settle_previous_session,
    split_turns,
    turn_signals,
    undo_signal,
)
from agent.permission_files import load_policy
from agent.permissions import PermissionPolicy, rollout_policy
from agent.policy import EndpointPolicy, EnginePolicy, Policy, endpoint_tokenizer
from agent.prompt import system_prompt
from agent.replay import (
    call_ids,
    conversation,
    history_updates,
    last_request,
    last_rewind,
    last_turn_checkpoint,
    token_state,
)
from agent.retrieval.repomap import workspace_repo_map
from agent.retrieval.service import live_index
from agent.sandbox import isolation_status
from agent.session_log import (
    SessionLog,
    SessionLogError,
    default_log_dir,
    read_session,
    workspace_slug,
)
from agent.tools.base import ToolContext, ToolRegistry
from agent.tools.codebase import CodebaseSearch
from agent.tools.files import CHANGED_KEY, file_tools
from agent.tools.lints import ReadLints
from agent.tools.search import Glob, Grep, ListDir
from agent.tools.terminal import RunTerminal
from agent.tools.todo import TodoWrite
from agent.turn_review import FileHunks, Pick, UndoResult, apply_review, plan_review, turn_changes
from agent.workspace import Workspace

logger = logging.getLogger(__name__)
MAX_LOGGED_PATHS = 1000
"""Paths of each kind a restore record lists (the checkpoint store has them all)."""


def log_path_of(workspace: Path, session_id: str, log_dir: Path | None = None) -> Path:
    """Where the log of `session_id` in `workspace` is; SessionLogError when there is none."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", session_id) or session_id.startswith("."):
        raise SessionLogError(f"session id {session_id!r} must be letters, digits, '.', '_' or '-'")
    root = Path(log_dir) if log_dir is not None else default_log_dir()
    path = root / workspace_slug(Path(workspace).expanduser().resolve()) / f"{session_id}.jsonl"
    if not path.is_file():
        raise SessionLogError(f"no session {session_id!r} for workspace {workspace} (looked for {path})")
    return path


def default_tools() -> ToolRegistry:
    """The harness's tools, fresh instances (codebase_search joins when the index exists)."""
    return ToolRegistry([*file_tools(), ListDir(), Glob(), Grep(), RunTerminal(), ReadLints(), TodoWrite()])


@dataclass(kw_only=True)
class SessionConfig:
    workspace: Path
    endpoint: str | None = None
    """An OpenAI-compatible base URL; None runs the in-process engine."""
    model: str | None = None
    """Checkpoint directory (in-process) or model name (endpoint); None is composer-mini."""
    tokenizer: Path | None = None
    """The endpoint's model's checkpoint (its tokenizer), for token-in prompts; None: `model`
    when it is a local checkpoint, composer-mini's when `model` names it, else text only."""
    api_key: str | None = None
    quantize: str = "int4"
    """In-process engine weights: int4 (fast on CPUs) or none."""
    log_dir: Path | None = None
    """Where session logs go (default: $COMPOSER_LOG_DIR or ~/.local/share/composer/sessions)."""
    auto_allow: bool = False
    """Allow everything (RL rollouts in a sandbox, `--yes`) instead of the permission files."""
    allow_unsandboxed: bool = False
    """`--allow-unsandboxed`: run commands where the sandbox is weaker than bubblewrap. Without it
    (or the user's config.toml saying so) such a session fails closed: agent/isolation.py."""
    checkpoints: bool = True
    warm_checkpoints: bool = True
    """A workspace with no checkpoint yet is recorded in the background as the session starts, so
    its first write waits only for what changed since, not for the whole tree to be read."""
    index: str | None = None
    """Semantic codebase search: "minilm" (bundled), an embeddings URL, or "off"; None reads
    $COMPOSER_INDEX (default minilm). The index builds in the background, shared per workspace."""
    repo_map_tokens: int = 1024
    """Budget of the repo map in the system prompt (0: none)."""
    client: str | None = None
    """Who drives the session (lsp, acp, web, cli, rollout): recorded in the log's header."""
    task_id: str | None = None
    """The task a rollout or evaluation works on: recorded in the log's header."""
    loop: LoopConfig = field(default_factory=LoopConfig)


_ENGINES: dict[tuple, Any] = {}
_ENGINES_LOCK = threading.Lock()
"""Sessions created together (a benchmark's parallel attempts) build their engine in threads:
one builds it, the others wait for it, so no second copy is loaded."""


def _shared_engine(model: str | None, quantize: str):
    """One engine per checkpoint and quantisation for the whole process: sessions share it and
    it batches their requests. It commits its KV memory in the background from the start
    (model/prefault.py), as a long-lived server should, unless COMPOSER_PREFAULT=0."""
    from model.engine import Engine
    from model.prefault import enabled_by_env

    key = (model, quantize)
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            _ENGINES[key] = Engine.from_pretrained(model, quantize=quantize, prefault=enabled_by_env())
        return _ENGINES[key]


def _settle_previous(root: Path, workspace: Workspace, log_dir: Path | None) -> None:
    """Judges the workspace's previous session's edits against the files as they are now."""
    def read_text(rel: str) -> str | None:
        try:
            if not workspace.is_file(rel):
                return None
            return workspace.read_text(rel)
        except Exception:  # unreadable now (binary, too large, outside the root): judged changed
            return ""

    try:
        settle_previous_session(root, read_text, log_dir=log_dir)
    except (OSError, ValueError) as err:  # never stops a new session
        logger.warning("could not judge the previous session in %s: %s", root, err)


def _warm_up(store: CheckpointStore) -> None:
    """Records a workspace that has no checkpoint yet, in a daemon thread: the store's lock (one
    per workspace in a process) puts the session's first write after it, a write or another
    session that got there first makes it a no-op, and a process that exits meanwhile does not
    wait for it (a record is published last, so one cut short leaves no checkpoint)."""
    if not store.is_empty():
        return

    def record() -> None:
        try:
            store.create_if_empty("the workspace when a session first opened it")
        except Exception as err:  # a full disk, say: the first write records it then
            logger.warning("could not record %s before its first write: %s", store.root, err)

    threading.Thread(target=record, name="composer-first-checkpoint", daemon=True).start()


class Session:
    def __init__(self, config: SessionConfig, agent: Agent, log: SessionLog, workspace: Workspace,
                 checkpoints: CheckpointStore | None) -> None:
        self.config, self.agent, self.log, self.workspace = config, agent, log, workspace
        self.checkpoints = checkpoints
        self.id = log.session_id
        self._turn: asyncio.Task | None = None
        self.changing: str | None = None
        """What the person asked to change the workspace with while it runs ("a rewind", "an undo
        of changes"): prompts, rewinds and undos are refused until it ends."""
        self._restored: str | None = None
        """The checkpoint the last rewind went to, until the next prompt: the same rewind again
        (to forget the turn after undoing it) is not a second undo signal."""

    @property
    def turn_undone(self) -> bool:
        """The last turn's changes were rewound already (and nothing was asked since)."""
        return self._restored is not None and self._restored == self.agent.turn_checkpoint

    @classmethod
    async def create(
        cls,
        config: SessionConfig,
        *,
        events: Any = None,
        policy: Policy | None = None,
        ask: Callable[..., Awaitable[str]] | None = None,
        workspace: Workspace | None = None,
        tools: ToolRegistry | None = None,
        log: SessionLog | None = None,
    ) -> Session:
        """A new session; with `log`, one that goes on appending to that (reopened) log."""
        root = Path(config.workspace).expanduser().resolve()
        workspace = workspace or Workspace(root)
        permissions: PermissionPolicy = rollout_policy() if config.auto_allow else load_policy(root)
        ctx = ToolContext(workspace)
        # below bubblewrap: a rollout refuses to start, an editor's policy asks about every command
        gate_session(await asyncio.to_thread(isolation_status, config.allow_unsandboxed), permissions,
                     ctx.state, client=config.client, auto_allow=config.auto_allow)
        checkpoints = CheckpointStore(root) if config.checkpoints else None
        if policy is None:
            if config.endpoint:
                tokenizer = await asyncio.to_thread(endpoint_tokenizer, str(config.tokenizer or config.model or ""))
                policy = EndpointPolicy(config.endpoint, model=config.model, api_key=config.api_key, tokenizer=tokenizer)
            else:
                engine = await asyncio.to_thread(_shared_engine, config.model, config.quantize)
                # The log names the checkpoint (composer-mini-trained's directory, say): the
                # dataset's model filter and a resumed session's token state go by it.
                policy = EnginePolicy(engine, model_id=str(config.model or "composer-mini"))
        live = live_index(root, config.index)
        if tools is None:
            tools = default_tools()
            if live is not None:
                tools.register(CodebaseSearch(live.index))
        repo_map = ""
        if config.repo_map_tokens > 0:
            repo_map = await asyncio.to_thread(workspace_repo_map, workspace, budget_tokens=config.repo_map_tokens)
        system = system_prompt(root, repo_map=repo_map, semantic_search="codebase_search" in tools,
                               display_root=workspace.display_root)
        header = {k: v for k, v in (("client", config.client), ("task_id", config.task_id)) if v}
        if log is None:
            await asyncio.to_thread(_settle_previous, root, workspace, config.log_dir)
        model = {"id": policy.model_id, "backend": "endpoint" if config.endpoint else "engine"}
        if hasattr(policy, "engine"):
            model["weight_version"] = getattr(policy.engine, "weight_version", 0)
        log = log or SessionLog.open(
            root, model=model, tools=tools.openai_tools(), system_prompt=system, log_dir=config.log_dir,
            sampler={"temperature": config.loop.temperature, "top_p": config.loop.top_p, "seed": config.loop.seed,
                     "max_tokens": config.loop.max_tokens_per_step}, **header,
        )
        log.tokenizer = getattr(policy, "tokenizer", None)  # redaction reaches the ids it writes
        agent = Agent(
            policy, tools, ctx, system=system, config=config.loop, permissions=permissions,
            ask=ask, checkpoints=checkpoints, log=log, events=events,
        )
        log.rest()  # an idle session holds no file descriptor
        if checkpoints is not None and config.warm_checkpoints:
            _warm_up(checkpoints)  # beside the model's first reply
        return cls(config, agent, log, workspace, checkpoints)

    @classmethod
    async def load(cls, config: SessionConfig, session_id: str, **kwargs: Any) -> tuple[Session, list[dict]]:
        """A logged session of `config.workspace`, continued: the conversation is restored and
        new records append to its log. Returns it with the updates that replay its history."""
        path = log_path_of(config.workspace, session_id, config.log_dir)
        records = read_session(path)
        session = await cls.create(config, log=SessionLog.reopen(path), **kwargs)
        agent = session.agent
        agent.resume(conversation(records, agent.messages[0]["content"]), call_ids(records),
                     last_turn_checkpoint(records), token_state(records, agent.policy.model_id),
                     last_request(records))
        session._restored = last_rewind(records)
        return session, history_updates(records, session.agent.tools)

    @property
    def log_path(self) -> Path:
        return self.log.path

    @property
    def last_checkpoint(self) -> str | None:
        return self.agent.last_checkpoint

    async def prompt(self, text: str) -> TurnResult:
        """Runs one turn; a second prompt while one runs is refused (ACP allows one at a time)."""
        if self._turn is not None and not self._turn.done():
            raise RuntimeError("a prompt is already running in this session; cancel it first")
        if self.changing:
            raise RuntimeError(f"{self.changing} is running in this session; prompt again when it is done")
        self._restored = None
        self._turn = asyncio.ensure_future(self.agent.run_turn(text))
        try:
            result = await asyncio.shield(self._turn)
            await asyncio.to_thread(self._write_turn_signals)
            return result
        finally:
            if self._turn.done():
                self.log.rest()  # a later write (another turn, a restore) reopens it

    def cancel(self) -> None:
        if self._turn is not None and not self._turn.done():
            self._turn.cancel()

    async def restore(self, checkpoint_id: str, forget: bool = False) -> tuple[Any, BufferRewind]:
        """Returns the workspace to a checkpoint: the disk in a thread (a big tree takes seconds,
        and the server's other sessions go on), then the agent's edits still unsaved in the
        editor's buffers (agent/buffer_rewind.py). Refused while a turn runs, whose
        tools would write on, and a prompt is refused while it runs. The model is told what went
        back; with `forget` (the last turn's checkpoint only) the turn leaves the conversation
        instead, as if it had not happened. Returns the store's RestoreResult (its backup records
        the unsaved buffers too) and the buffers put back. Forgetting a turn just rewound leaves
        the workspace as it is (what the person did since the rewind stays)."""
        self._require_idle("rewinding")
        if forget and checkpoint_id != self.agent.turn_checkpoint:
            raise RuntimeError("only the last turn can leave the conversation: rewind to its checkpoint (the default)")
        if forget and self._restored == checkpoint_id:
            result = RestoreResult(self.checkpoints.get(checkpoint_id), Changes(), None)
            self._log_restore(result, BufferRewind(), forget)
            return result, BufferRewind()
        recorded = self.checkpoints.buffers(checkpoint_id)  # damage refuses before anything changes
        ws = self.workspace
        before, unsaved = {p: ws.buffer(p)[0] for p in ws.open_buffers()}, ws.unsaved()
        self.changing = "a rewind"

        async def rewind() -> tuple[Any, BufferRewind]:
            result = await self.checkpoints.arestore(checkpoint_id, buffers=unsaved)
            return result, await rewind_buffers(self.checkpoints, checkpoint_id, ws, before, unsaved, recorded)

        rewinding = asyncio.ensure_future(rewind())
        try:
            result, buffers = await asyncio.shield(rewinding)
        except asyncio.CancelledError:  # the request was cancelled; the rewind runs to its end
            await asyncio.wait([rewinding])
            if not rewinding.cancelled() and rewinding.exception() is None:
                self._log_restore(*rewinding.result(), forget)
            raise
        finally:
            self.changing = None
        self._log_restore(result, buffers, forget)
        return result, buffers

    def forget_turn(self) -> None:
        """Takes the last turn out of the conversation when it changed no file (an answer the
        person does not want the model to build on); one that changed files is forgotten with
        `restore(turn_checkpoint, forget=True)`, which takes its changes back as well. Logged as
        a `forget` record and a `turn_forgotten` signal."""
        self._require_idle("forgetting a turn")  # without checkpoints, whether it wrote is unknown
        if self.agent.turn_checkpoint is not None:
            raise RuntimeError("the last turn changed files: rewind it with the conversation to forget it")
        self.agent.forget_last_turn()  # RuntimeError when there is no turn to forget
        self.log.write("forget", by="user", forgot_turn=True)
        self.log.write("outcome", **forget_signal())

    def _require_idle(self, doing: str) -> None:
        """Refuses what changes the workspace beside this session's turn or rewind."""
        if self.checkpoints is None:
            raise RuntimeError("checkpoints are off in this session")
        if self._turn is not None and not self._turn.done():
            raise RuntimeError(f"a turn is running in this session; cancel it before {doing}")
        if self.changing:
            raise RuntimeError(f"{self.changing} is running in this session; try again when it is done")

    async def turn_changes(self, checkpoint_id: str | None = None) -> tuple[str, list[FileHunks]]:
        """The changes since `checkpoint_id` (default: before the last turn's first change), hunk
        by hunk (agent/turn_review.py), with the checkpoint they are against."""
        checkpoint = self._review_checkpoint(checkpoint_id)
        edited = set(self.agent.ctx.state.get(CHANGED_KEY, [])) & set(self.workspace.open_buffers())
        return checkpoint, await asyncio.to_thread(turn_changes, self.checkpoints, checkpoint, self.workspace, edited)

    async def review_hunks(self, undo: list[Pick], keep: list[Pick],
                           checkpoint_id: str | None = None) -> tuple[UndoResult, str | None]:
        """Undoes the `undo` hunks (after a backup checkpoint, returned, that undoes the undo) and
        logs the person's verdict on each hunk undone or kept, with its edit_accepted outcome."""
        both = {(p.path, p.index) for p in undo} & {(p.path, p.index) for p in keep}
        if both:
            raise RuntimeError(f"a change cannot be both undone and kept: {sorted(both)}")
        self._require_idle("undoing changes")
        checkpoint = self._review_checkpoint(checkpoint_id)
        self.changing = "an undo of changes"
        try:
            plan = await asyncio.to_thread(plan_review, self.checkpoints, checkpoint, self.workspace, undo, keep)
            backup = (await self.checkpoints.acreate(f"before undoing {len(plan.writes)} files' changes",
                                                     self.workspace.unsaved())).id \
                if plan.writes else None
            result = await apply_review(self.workspace, plan)
        finally:
            self.changing = None
        if result.undone:
            self._restored = None  # the files moved on from that rewind
        note = undo_note(result.undone)
        if note:
            self.agent.tell(note)
        verdicts = [*((p, False) for p in result.undone), *((p, True) for p in result.kept)]
        for i, (pick, accepted) in enumerate(verdicts):
            told = {"harness_message": note} if note and i == len(verdicts) - 1 else {}
            self.log.write("edit_review", path=pick.path, hunk=pick.index, accepted=accepted, by="user", **told)
            self.log.write("outcome", signal="edit_accepted", value=accepted, reward=1.0 if accepted else -1.0,
                           source="editor", path=pick.path, detail={"hunk": pick.index})
        return result, backup

    def _review_checkpoint(self, checkpoint_id: str | None) -> str:
        checkpoint = checkpoint_id or self.agent.turn_checkpoint
        if self.checkpoints is None or checkpoint is None:
            raise RuntimeError(f"session {self.id} has no checkpoint to compare with")
        return checkpoint

    def _log_restore(self, result: Any, buffers: BufferRewind, forget: bool) -> None:
        """Logs the rewind and its outcome signal; tells the model what it undid, or forgets the
        turn."""
        cp = result.checkpoint
        told: dict[str, Any] = {"forgot_turn": True}
        if forget:
            self.agent.forget_last_turn()
        else:
            told = {"harness_message": rewind_note(cp.id, cp.label, result.changes, buffers.reverted)}
            self.agent.tell(told["harness_message"])
        changes = result.changes.to_dict()
        if any(len(paths) > MAX_LOGGED_PATHS for paths in changes.values()):  # a shell turn's `rm -rf`
            told["changes_truncated"] = True
            changes = {kind: paths[:MAX_LOGGED_PATHS] for kind, paths in changes.items()}
        self.log.write("restore", checkpoint_id=cp.id, backup_id=result.backup.id if result.backup else None,
                       changes=changes, by="user", **told)
        if self._restored != cp.id:
            self.log.write("outcome", **undo_signal(cp.id))
        self._restored = cp.id

    def _write_turn_signals(self) -> None:
        """The finished turn's outcome signals (agent/outcomes.py), read back from its log."""
        try:
            turns = split_turns(read_session(self.log.path))
            for fields in turn_signals(turns[-1] if turns else [], str(self.workspace.root)):
                self.log.write("outcome", **fields)
        except (OSError, ValueError) as err:  # a signal must never fail the turn
            logger.warning("session %s: no outcome signals for the turn: %s", self.id, err)

    def close(self) -> None:
        self.log.close()

    async def aclose(self) -> None:
        """close(), and the policy's connections (an endpoint's HTTP session)."""
        self.close()
        closing = getattr(self.agent.policy, "aclose", None)
        if closing is not None:
            await closing()
