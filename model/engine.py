"""The inference engine: continuous batching over a preallocated KV cache, greedy and sampled
decoding, streaming, stop sequences, logprobs, routed-expert records, and exact prompt-lookup
speculative decoding.

One worker thread owns the model. Requests queue up; each step admits waiting requests into free
cache rows (prefill), then decodes every active row together, verifying each row's draft tokens
in the same forward pass. Finished rows leave at once and a waiting request takes their place.
A lone sequence's plain steps on an int4 model run as one C++ call instead (model/fused_decode.py,
the same logits).

    engine = Engine.from_pretrained()                    # composer-mini, built on first use
    [out] = engine.generate([engine.tokenizer.encode_chat(messages)], SamplingParams(max_tokens=64))
    async for event in engine.stream(prompt_ids, params): print(event.text, end="")
    engine.load_weights(state_dict, version=3)           # RL weight sync (see load_weights)

Weight versions: `engine.weight_version` (0 at load unless given) names the weights; every
Completion carries the version it ran on. A request runs on one version from prefill to its last
token: `load_weights` swaps only between decoding steps, after the requests running at that
moment have finished ("finish", the default) or have been ended with finish_reason "abort"
("abort"; the caller resumes one by sending prompt_ids + token_ids as a new request). Requests
that arrive meanwhile wait and run on the new weights. The KV cache holds nothing across a load
(model/layers.py's KVCache.reset states the rule a prefix cache must keep).

Legend: B active rows, S positions fed per row this step, V vocab, L layers, k experts per token.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import queue
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from model.fused_decode import (
    FusedDecode,
    FusedDecodeUnavailable,
    enabled_by_env,
    unsupported_reason,
)
from model.hf import load_model, load_state_dict
from model.layers import KVCache
from model.openmp import release_openmp_threads
from model.sampling import SamplingParams
from model.sequence import Completion, Sequence, StreamEvent
from model.speculative import propose
from model.transformer import Transformer
from model.weights import WeightUpdate

PREFILL_CHUNK = 2048
IN_FLIGHT = ("finish", "abort")
"""What load_weights does with running requests: let them finish on the old weights, or end them."""


class ContextLengthError(ValueError):
    """The prompt does not fit in the context window."""


@dataclass
class WeightLoad:
    """What one load_weights call did."""

    version: int
    tensors: int
    """Named tensors applied."""
    prepare_seconds: float
    """Checking, converting and re-quantizing, while the engine kept serving."""
    drain_seconds: float
    """Waiting for the running requests to finish (or to be ended) at a step boundary."""
    swap_seconds: float
    """Copying the weights in and resetting the cache: the engine is paused only for this."""
    aborted: int
    """Requests ended with finish_reason "abort"."""


@dataclass
class _Swap:
    update: WeightUpdate
    version: int
    in_flight: str
    requested: float = field(default_factory=time.perf_counter)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    drain_seconds: float = 0.0
    swap_seconds: float = 0.0
    aborted: int = 0


@dataclass(eq=False)  # compared by identity: the active list holds each request once
class _Pending:
    seq: Sequence
    on_event: Callable[[StreamEvent], None]
    on_done: Callable[[Completion | BaseException], None]
    cancelled: threading.Event = field(default_factory=threading.Event)


class Engine:
    def __init__(
        self,
        model: Transformer,
        tokenizer,
        *,
        max_batch: int = 8,
        max_seq_len: int | None = None,
        fused_decode: bool | None = None,
        weight_version: int = 0,
    ) -> None:
        """`fused_decode`: decode a lone sequence's plain steps in one C++ call
        (model/fused_decode.py; int4 models only, the same logits). None (default): when the
        model is int4 and the extension builds, unless COMPOSER_FUSED_DECODE=0; True: required
        (raises when unavailable); False: never. `weight_version` names the model's weights."""
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = model.config
        self.max_batch = max_batch
        self.max_seq_len = min(max_seq_len or self.config.max_position_embeddings, self.config.max_position_embeddings)
        self.dtype = model.embed.weight.dtype
        self.device = model.embed.weight.device
        # One extra position: draft padding of short rows is written there and never attended to.
        self.weight_version = _check_version(weight_version)
        self.cache = KVCache(self.config, max_batch, self.max_seq_len + 1, self.dtype, self.device, weight_version)
        self._active: list[_Pending] = []
        self._queue: queue.Queue[_Pending] = queue.Queue()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._token_table = None
        self._swap: _Swap | None = None
        self._load_lock = threading.Lock()
        self.fused = self._build_fused(fused_decode)
        atexit.register(self.close)

    def _build_fused(self, option: bool | None):
        if option is False or (option is None and (not enabled_by_env() or unsupported_reason(self.model))):
            return None  # models it cannot run (fp32, bf16) stay quiet: nothing is lost
        try:
            return FusedDecode.build(self.model, self.cache)
        except FusedDecodeUnavailable as err:
            if option:
                raise
            print(f"composer: fused decode unavailable, decoding on the eager path: {err}", file=sys.stderr, flush=True)
            return None

    @classmethod
    def from_pretrained(
        cls, path: str | Path | None = None, *, dtype: torch.dtype | None = None, quantize: str = "none", **kwargs
    ) -> Engine:
        """Loads a checkpoint directory (default: composer-mini, built on first use).
        `quantize="int4"`: weight-only int4 for fast CPU decoding (model/quant.py); "none" keeps
        the checkpoint's weights, whose logprobs match the trainer's exactly."""
        from model.home import ensure_default_model
        from model.quant import quantize_model
        from model.tokenizer import Tokenizer

        path = Path(path).expanduser() if path is not None else ensure_default_model()
        model = quantize_model(load_model(path, dtype=dtype), quantize)
        return cls(model, Tokenizer.from_dir(path), **kwargs)

    def tool_call_constraint(self, tools: list[dict] | None, mode: str = "auto"):
        """A fresh per-request constraint that keeps tool calls well-formed (model/constrained.py);
        the vocabulary's token table is built once per engine."""
        from model.constrained import TokenTable, ToolCallConstraint

        with self._lock:
            if self._token_table is None:
                tok = self.tokenizer
                # End-of-turn first: the constraint ends free text with the first of these.
                stops = list(dict.fromkeys([tok.eos_token_id, *tok.stop_token_ids]))
                self._token_table = TokenTable(
                    tok.token_strings(), eos_token_ids=stops, special_token_ids=tok.special_token_ids
                )
        return ToolCallConstraint(self._token_table, tools=tools, mode=mode)

    # ---- public API -----------------------------------------------------------------------------

    def submit(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        on_event: Callable[[StreamEvent], None] = lambda _: None,
        on_done: Callable[[Completion | BaseException], None] = lambda _: None,
    ) -> Callable[[], None]:
        """Queues a request; callbacks run on the worker thread. Returns a cancel function."""
        seq = self._new_sequence(prompt_ids, params)
        pending = _Pending(seq, on_event, on_done)
        self._queue.put(pending)
        self._ensure_worker()
        self._wake.set()
        return pending.cancelled.set

    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]) -> list[Completion]:
        """Runs the prompts as one batch (and alongside any other requests) to completion."""
        all_params = params if isinstance(params, list) else [params] * len(prompts)
        if len(all_params) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(all_params)} sampling params")
        results: list[Completion | BaseException | None] = [None] * len(prompts)
        done = threading.Semaphore(0)

        def finisher(i: int):
            def on_done(result):
                results[i] = result
                done.release()
            return on_done

        seqs = [self._new_sequence(p, sp) for p, sp in zip(prompts, all_params)]  # validate all first
        for i, seq in enumerate(seqs):
            self._queue.put(_Pending(seq, lambda _: None, finisher(i)))
        self._ensure_worker()
        self._wake.set()
        for _ in prompts:
            done.acquire()
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results  # type: ignore[return-value]

    async def stream(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[StreamEvent]:
        """Yields one event per decoding step (one or more tokens); the last has `finished` set.
        Closing the iterator early cancels the request."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def deliver(item) -> None:
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody listens
                loop.call_soon_threadsafe(events.put_nowait, item)

        cancel = self.submit(prompt_ids, params, on_event=deliver, on_done=deliver)
        try:
            while True:
                item = await events.get()
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, Completion):
                    return
                yield item
        finally:
            cancel()

    def close(self) -> None:
        """Stops the worker thread once the running requests finish; later requests restart it."""
        self._closed = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._closed = False

    def load_weights(
        self, weights: Mapping[str, torch.Tensor] | str | Path, version: int | None = None, *, in_flight: str = "finish"
    ) -> WeightLoad:
        """Loads new weights into the running engine and names them `version` (default: the
        current version + 1); returns when requests run on them.

        `weights`: a state dict under the checkpoint's Hugging Face names, the model's own
        parameter names, or both; all tensors or some (e.g. the ones a LoRA merge changed); or
        the path of a safetensors file or checkpoint directory. Every tensor is checked (names,
        shapes, floating dtypes, finite values) and converted (int4: re-quantized) before the
        engine pauses; a bad one raises model.weights.WeightUpdateError and nothing is written.

        In-flight requests (`in_flight`): "finish" lets the requests running now finish on the
        old weights (their Completion.weight_version is the old version) and holds new ones
        back until the swap; "abort" ends them at the next step boundary with finish_reason
        "abort" and the old version (resume one by sending prompt_ids + token_ids again). Either
        way no request mixes versions; "finish" waits up to the running requests' max_tokens,
        "abort" up to one decoding step. The swap itself is a copy into the live tensors, then
        the KV cache is reset and the fused step rebuilt. Call it from any thread but the
        engine's; the tensors are read until it returns."""
        if in_flight not in IN_FLIGHT:
            raise ValueError(f"in_flight must be one of {IN_FLIGHT}, got {in_flight!r}")
        if threading.current_thread() is self._thread:
            raise RuntimeError("load_weights was called on the engine's own thread (from a callback); it would wait forever")
        with self._load_lock:
            version = _check_version(self.weight_version + 1 if version is None else version)
            started = time.perf_counter()
            tensors = load_state_dict(weights) if isinstance(weights, (str, Path)) else weights
            swap = _Swap(WeightUpdate.prepare(self.model, tensors), version, in_flight)
            prepared = time.perf_counter()
            self._swap = swap
            self._ensure_worker()
            self._wake.set()
            swap.done.wait()
        if swap.error is not None:
            raise swap.error
        return WeightLoad(
            version, len(swap.update.names), prepared - started, swap.drain_seconds, swap.swap_seconds, swap.aborted
        )

    # ---- requests -------------------------------------------------------------------------------

    def _new_sequence(self, prompt_ids: list[int], params: SamplingParams) -> Sequence:
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        vocab = self.config.vocab_size
        if min(prompt_ids) < 0 or max(prompt_ids) >= vocab:
            raise ValueError(f"prompt token ids must be in [0, {vocab}), got {min(prompt_ids)}..{max(prompt_ids)}")
        if len(prompt_ids) >= self.max_seq_len:
            raise ContextLengthError(
                f"the prompt has {len(prompt_ids)} tokens; the context holds {self.max_seq_len} "
                "(prompt and completion together)"
            )
        stop_ids = params.stop_token_ids
        if stop_ids is None:
            stop_ids = [] if params.ignore_eos else list(self.tokenizer.stop_token_ids)
        return Sequence(list(prompt_ids), params, stop_ids, self.tokenizer, self.max_seq_len)

    # ---- worker ---------------------------------------------------------------------------------

    def _ensure_worker(self) -> None:
        # Called on the requesting thread: its idle OpenMP workers would slow the worker's
        # parallel regions down ~2x (model/openmp.py).
        release_openmp_threads()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="composer-engine", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        torch.set_grad_enabled(False)
        idle = False
        while True:
            swap = self._swap
            if swap is not None and (not self._active or swap.in_flight == "abort"):
                self._swap_weights(swap)
                continue
            if not self._active and self._queue.empty():
                if self._closed:
                    return
                if not idle:  # the next thread to run torch gets full-speed OpenMP workers
                    release_openmp_threads()
                    idle = True
                self._wake.wait(timeout=1.0)
                self._wake.clear()
                continue
            idle = False
            try:
                with torch.inference_mode():
                    if swap is None:  # during a drain, new requests wait for the new weights
                        self._admit()
                    self._drop_cancelled()
                    if self._active:
                        self._decode_step()
            except Exception as err:  # a bug or out-of-memory: fail these requests, keep serving
                for pending in self._active:
                    pending.on_done(err)
                self._active.clear()

    def _swap_weights(self, swap: _Swap) -> None:
        """On the worker, between steps, once no request is left running: the swap itself."""
        started = time.perf_counter()
        swap.drain_seconds = started - swap.requested
        try:
            for pending in list(self._active):  # in_flight="abort"
                pending.seq.finish("abort")
                self._after_step(pending)
                swap.aborted += 1
            swap.update.apply()
            self.cache.reset(swap.version)
            if self.fused is not None:
                self.fused = FusedDecode.build(self.model, self.cache)
            self.weight_version = swap.version
        except BaseException as err:  # not expected: every tensor was checked and converted
            swap.error = err
        finally:
            swap.swap_seconds = time.perf_counter() - started
            self._swap = None
            swap.done.set()

    def _admit(self) -> None:
        while len(self._active) < self.max_batch:
            try:
                pending = self._queue.get_nowait()
            except queue.Empty:
                return
            if pending.cancelled.is_set():
                pending.seq.finish("cancelled")
                self._after_step(pending)
                continue
            row = len(self._active)
            self._active.append(pending)
            try:
                self._prefill(row, pending.seq)
            except Exception as err:
                self._active.pop()
                pending.on_done(err)
                continue
            self._after_step(pending)

    def _prefill(self, row: int, seq: Sequence) -> None:
        started = time.perf_counter()
        ids = torch.tensor(seq.prompt_ids, device=self.device)
        n = len(ids)
        for start in range(0, n, PREFILL_CHUNK):
            end = min(n, start + PREFILL_CHUNK)
            out = self.model(
                ids[start:end].unsqueeze(0),
                positions_BS=torch.arange(start, end, device=self.device).unsqueeze(0),
                cache=self.cache,
                rows=slice(row, row + 1),
                attend_len=end,
                logits_at=torch.tensor([[end - start - 1]], device=self.device),
                return_routing=seq.params.return_routing,
            )
            if out.routing_BSLk is not None:
                seq.record_routing(out.routing_BSLk[0])
        seq.length = n
        seq.prefill_seconds = time.perf_counter() - started
        seq.accept(out.logits[0, -1:], drafts=[])

    def _decode_step(self) -> None:
        seqs = [p.seq for p in self._active]
        drafts = [self._draft(seq) for seq in seqs]
        if self._fused_step(seqs, drafts):
            return
        S = 1 + max(len(d) for d in drafts)
        B = len(seqs)
        ids = torch.zeros(B, S, dtype=torch.long)
        positions = torch.zeros(B, S, dtype=torch.long)
        write_at = torch.full((B, S), self.max_seq_len, dtype=torch.long)  # padding -> spare slot
        for b, (seq, draft) in enumerate(zip(seqs, drafts)):
            fed = [seq.last_token, *draft]
            ids[b, : len(fed)] = torch.tensor(fed)
            positions[b] = (seq.length + torch.arange(S)).clamp(max=self.max_seq_len - 1)
            write_at[b, : len(fed)] = positions[b, : len(fed)]
        attend_len = max(seq.length + 1 + len(d) for seq, d in zip(seqs, drafts))
        if B > 1:  # shorter rows read past their end (masked): that memory must hold numbers
            for b, seq in enumerate(seqs):
                self.cache.make_finite(b, seq.length, attend_len)
        out = self.model(
            ids.to(self.device),
            positions_BS=positions.to(self.device),
            cache=self.cache,
            rows=slice(0, B),
            attend_len=attend_len,
            write_at_BS=write_at.to(self.device) if S > 1 else None,
            return_routing=any(seq.params.return_routing for seq in seqs),
        )
        logits = out.logits.float().cpu()
        for b, (pending, draft) in enumerate(zip(list(self._active), drafts)):
            fed = pending.seq.accept(logits[b], drafts=draft)
            if out.routing_BSLk is not None and pending.seq.params.return_routing:
                pending.seq.record_routing(out.routing_BSLk[b, :fed])
            pending.seq.length += fed
        for pending in list(self._active):
            self._after_step(pending)

    def _fused_applies(self, seq: Sequence) -> bool:
        """Whether `seq`'s next plain step runs fused: it decodes alone, without routing records."""
        return self.fused is not None and len(self._active) == 1 and not seq.params.return_routing

    def _fused_step(self, seqs: list[Sequence], drafts: list[list[int]]) -> bool:
        """The common case in one C++ call: one sequence, one new token, no routing records.
        Returns False (nothing done) for anything else."""
        if drafts[0] or not self._fused_applies(seqs[0]):
            return False
        seq = seqs[0]
        if seq.length >= self.max_seq_len:  # the eager path's clamped position: leave it to it
            return False
        logits_1V = self.fused.step(seq.last_token, seq.length)  # cache row 0: the only active row
        seq.length += seq.accept(logits_1V, drafts=[])
        self._after_step(self._active[0])
        return True

    def _draft(self, seq: Sequence) -> list[int]:
        if not seq.params.use_speculation:
            return []
        if seq.params.speculative is None and self._fused_applies(seq):
            # The engine's choice: a fused step (~7 ms) beats verifying drafts on the eager
            # path, even when most drafts are accepted (docs/benchmarks.md). Asked-for drafts stay.
            return []
        if seq.draft_pause > 0:
            seq.draft_pause -= 1
            return []
        room = min(seq.draft_limit, seq.tokens_left - 1, self.max_seq_len - seq.length - 1)
        return propose(np.asarray(seq.all_ids), room) if room > 0 else []

    def _after_step(self, pending: _Pending) -> None:
        seq = pending.seq
        event = seq.take_event()
        if event is not None:
            pending.on_event(event)
        if seq.finish_reason is not None:
            if pending in self._active:
                self._release(pending)
            done = seq.completion()
            done.weight_version = self.weight_version
            pending.on_done(done)

    def _drop_cancelled(self) -> None:
        for pending in list(self._active):
            if pending.cancelled.is_set():
                pending.seq.finish("cancelled")
                self._after_step(pending)

    def _release(self, pending: _Pending) -> None:
        """Removes a finished row, moving the last active row into its cache slot."""
        row = self._active.index(pending)
        last = len(self._active) - 1
        if row != last:
            moved = self._active[last]
            self.cache.move_row(last, row, moved.seq.length)
            self._active[row] = moved
        self._active.pop()


def _check_version(version: object) -> int:
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ValueError(f"a weight version is an integer >= 0, got {version!r}")
    return version
