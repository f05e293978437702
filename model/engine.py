"""The inference engine: continuous batching over a preallocated KV cache with prefix reuse,
chunked prefill interleaved with decoding, greedy and sampled decoding, streaming, stop
sequences, logprobs, routed-expert records, and exact prompt-lookup speculative decoding.

One worker thread owns the model. Requests queue up; each iteration of the worker
- admits waiting requests into free cache rows, copying the longest cached prefix of each
  prompt into its row (model/prefix_cache.py); a request whose prompt shares an uncached
  prefix with one being prefilled waits for it, so an RL group prefills its prompt once;
- decodes one token of every decoding sequence together (model/fused_decode.py's C++ step, or
  the Python path where the step is unavailable); a lone greedy sequence also verifies its
  prompt-lookup draft in that step, as rows at the next positions of its cache row, so the
  tokens equal plain decoding's;
- prefills the next chunk of the waiting prompts, several sequences in one forward, with at most
  `prefill_chunk` tokens while others decode (so a long prompt delays their next token by one
  chunk, not by its whole prefill) and `idle_prefill_chunk` when nobody does.
Finished sequences leave at once and free their row. Every kernel is row-invariant
(model/kernels.py), so a request's tokens and logits do not depend on what it was batched with or
on what the prefix cache held.

    engine = Engine.from_pretrained()                    # composer-mini, built on first use
    [out] = engine.generate([engine.tokenizer.encode_chat(messages)], SamplingParams(max_tokens=64))
    async for event in engine.stream(prompt_ids, params): print(event.text, end="")
    engine.prefix_cache_report()                         # sizes, hits, evictions
    engine.load_weights(state_dict, version=3)           # RL weight sync (see load_weights)

Weight versions: `engine.weight_version` (0 at load unless given) names the weights; every
Completion carries the version it ran on. A request runs on one version from prefill to its last
token: `load_weights` swaps only between steps, after the requests running at that moment have
finished ("finish", the default) or have been ended with finish_reason "abort" ("abort"; the
caller resumes one by sending prompt_ids + token_ids as a new request). Requests that arrive
meanwhile wait and run on the new weights. The prefix cache is keyed by the weight version (and
the KV dtype) and emptied by a load: nothing computed with old weights is ever reused.

Legend: B decoding sequences, N tokens in a forward, V vocab, L layers, k experts per token.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from model.fused_decode import FusedDecode, enabled_by_env, unsupported_reason
from model.hf import load_state_dict
from model.kernels import DECODE, PREFILL, Kernels
from model.kv import KVCache, default_kv_dtype, kv_dtype
from model.openmp import release_openmp_threads
from model.prefault import Prefaulter
from model.prefix_cache import DEFAULT_BLOCK, PrefixCache
from model.runner import Runner
from model.sampling import SamplingParams
from model.sequence import Completion, Sequence, StreamEvent
from model.transformer import Transformer
from model.weights import WeightUpdate

log = logging.getLogger(__name__)

PREFILL_CHUNK = 512
"""Most prompt tokens per iteration while other sequences decode."""
IDLE_PREFILL_CHUNK = 4096
"""Most prompt tokens per iteration when no sequence decodes."""
PREFIX_CACHE_GB = 1.5
DEDUP_BLOCKS = 2
"""A request waits for another's prefill when that will compute at least this many blocks of its prompt."""
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
    prompt_np: np.ndarray | None = None


class Engine:
    def __init__(
        self,
        model: Transformer,
        tokenizer,
        *,
        max_batch: int = 8,
        max_seq_len: int | None = None,
        fused_decode: bool | None = None,
        kv_cache_dtype: str | None = None,
        prefix_cache_gb: float = PREFIX_CACHE_GB,
        prefix_block: int = DEFAULT_BLOCK,
        prefill_chunk: int = PREFILL_CHUNK,
        idle_prefill_chunk: int = IDLE_PREFILL_CHUNK,
        weight_version: int = 0,
        prefault: bool = False,
    ) -> None:
        """`fused_decode`: decode plain steps in one C++ call (model/fused_decode.py; int4 models,
        the same logits). None (default): when the model is int4 and the extension builds, unless
        COMPOSER_FUSED_DECODE=0; True: required (raises when unavailable); False: never.
        `kv_cache_dtype`: "int8" (half bf16's bytes; needs the C++ kernels), "bf16" or "fp32";
        None: `default_kv_dtype`. `prefix_cache_gb`: memory for reused
        prompt prefixes (0 turns reuse off); it needs the C++ kernels (model/kernels.py).
        `weight_version` names the model's weights. `prefault`: commit the KV cache and the prefix
        pool in the background now, rather than page by page on first use (model/prefault.py:
        for long-lived servers; it makes all of that memory resident)."""
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = model.config
        self.max_batch = max_batch
        self.max_seq_len = min(max_seq_len or self.config.max_position_embeddings, self.config.max_position_embeddings)
        self.dtype = model.embed.weight.dtype
        self.device = model.embed.weight.device
        self.int4 = getattr(model, "quantization", "none") == "int4"
        cpu_fp32 = self.dtype == torch.float32 and self.device.type == "cpu"
        self.kernels = Kernels.load() if cpu_fp32 else Kernels(None, "not fp32 on the CPU")
        self.kv_dtype = kv_dtype(kv_cache_dtype or default_kv_dtype(self.int4, self.kernels.ext is not None))
        if self.kv_dtype == torch.int8 and self.kernels.ext is None:
            raise ValueError(f"kv_cache_dtype int8 needs the C++ kernels: {self.kernels.reason}")
        self.weight_version = _check_version(weight_version)
        self.cache = KVCache(self.config, max_batch, self.max_seq_len, self.kv_dtype, self.device, self.weight_version)
        self.runner = Runner(model, self.cache, self.kernels)
        self.prefix: PrefixCache | None = None
        if prefix_cache_gb > 0 and self.kernels.row_invariant:
            capacity = int(prefix_cache_gb * 2**30) // self.cache.bytes_per_position
            self.prefix = PrefixCache(self.cache, capacity, prefix_block, self.config.top_k)
        self.prefill_chunk, self.idle_prefill_chunk = prefill_chunk, idle_prefill_chunk
        self._swap: _Swap | None = None
        self._load_lock = threading.Lock()
        self._waiting: list[_Pending] = []
        self._active: list[_Pending] = []
        self._free_rows = list(range(max_batch - 1, -1, -1))
        self._queue: queue.Queue[_Pending] = queue.Queue()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._token_table = None
        self.fused = self._build_fused(fused_decode)
        self.prefaulter = None
        if prefault:  # the cache rows in the order requests take them, beside the pool's slots
            pool = self.prefix.memory_regions(parts=8) if self.prefix is not None else []
            self.prefaulter = Prefaulter(self.cache.row_regions(reversed(self._free_rows)), pool).start()
        atexit.register(self.close)

    def _build_fused(self, option: bool | None) -> FusedDecode | None:
        if option is False or (option is None and (not enabled_by_env() or unsupported_reason(self.model))):
            return None  # models it cannot run (fp32, bf16) stay quiet: nothing is lost
        if self.kernels.ext is None:
            if option:
                from model.fused_decode import FusedDecodeUnavailable

                raise FusedDecodeUnavailable(self.kernels.reason or "the C++ extension is unavailable")
            return None
        return FusedDecode.build(self.model, self.cache, self.kernels)

    @classmethod
    def from_pretrained(
        cls, path: str | Path | None = None, *, dtype: torch.dtype | None = None, quantize: str = "none", **kwargs
    ) -> Engine:
        """Loads a checkpoint directory (default: composer-mini; `checkpoint_dir` builds it first).
        `quantize="int4"`: weight-only int4 for fast CPU decoding (model/quant.py), with a trained
        checkpoint's LoRA adapter (its `adapter/`) kept beside the int4 matrices in fp32; "none"
        keeps the checkpoint's weights, whose logprobs match the trainer's exactly."""
        from model.home import checkpoint_dir
        from model.quant import load_quantized
        from model.tokenizer import Tokenizer

        path = checkpoint_dir(path)
        model = load_quantized(path, quantize, dtype=dtype)
        return cls(model, Tokenizer.from_dir(path), **kwargs)

    def tool_call_constraint(self, tools: list[dict] | None, mode: str = "auto", quotes: dict | None = None):
        """A fresh per-request constraint: well-formed tool calls, `quotes`' arguments copied from
        their texts (model/constrained.py); the token table is built once per engine."""
        from model.constrained import ToolCallConstraint
        from model.token_table import TokenTable

        with self._lock:
            if self._token_table is None:
                tok = self.tokenizer
                # The reply's end first: the constraint ends free text with the first of these.
                stops = list(dict.fromkeys([tok.reply_end_id, *tok.stop_token_ids]))
                self._token_table = TokenTable(tok.token_strings(), stops, tok.special_token_ids)
        return ToolCallConstraint(self._token_table, tools=tools, mode=mode, quotes=quotes)

    def prefix_cache_report(self) -> dict[str, Any]:
        """The prefix cache's configuration and counters (sizes, hits, evictions), or why it is off."""
        if self.prefix is None:
            reason = self.kernels.reason if not self.kernels.row_invariant else "prefix_cache_gb is 0"
            return {"enabled": False, "reason": reason}
        return {"enabled": True, "kv_dtype": str(self.kv_dtype).removeprefix("torch."), **self.prefix.report()}

    def prefault_report(self) -> dict[str, Any] | None:
        """How far committing the KV memory has got (model/prefault.py), or None without `prefault`."""
        return None if self.prefaulter is None else self.prefaulter.report()

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

    def _namespace(self) -> tuple:
        """What cached prefixes belong to: these weights (version and load), this KV dtype."""
        return (self.weight_version, self.cache.resets, str(self.kv_dtype))

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
            self._take_queued()
            swap = self._swap
            if swap is not None and (not self._active or swap.in_flight == "abort"):
                self._swap_weights(swap)
                continue
            if not self._active and not self._waiting:
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
                    self._iteration()
            except Exception as err:  # a bug or out-of-memory: fail these requests, keep serving
                log.exception("an engine step failed; its %d requests fail with it", len(self._active))
                for pending in self._active:
                    pending.on_done(err)
                    self._free_rows.append(pending.seq.row)
                self._active.clear()

    def _take_queued(self) -> None:
        while True:
            try:
                self._waiting.append(self._queue.get_nowait())
            except queue.Empty:
                return

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
            # The dense prompt copies of the layers written, and the fused step's references,
            # follow the new weights.
            self.runner.refresh(destination for destination, _ in swap.update.copies)
            if self.fused is not None:
                self.fused = FusedDecode.build(self.model, self.cache, self.kernels)
            self.cache.reset(swap.version)
            self.weight_version = swap.version
            if self.prefix is not None:
                self.prefix.clear()
        except BaseException as err:  # not expected: every tensor was checked and converted
            swap.error = err
        finally:
            swap.swap_seconds = time.perf_counter() - started
            self._swap = None
            swap.done.set()

    def _iteration(self) -> None:
        if self._swap is None:  # during a drain, new requests wait for the new weights
            self._admit()
        self._drop_cancelled()
        decoding = [p for p in self._active if p.seq.prefilled]
        if decoding:
            self._decode_step(decoding)
        prefilling = [p for p in self._active if not p.seq.prefilled]
        if prefilling:
            self._prefill_step(prefilling, self.prefill_chunk if decoding else self.idle_prefill_chunk)

    # ---- admission ------------------------------------------------------------------------------

    def _admit(self) -> None:
        for pending in list(self._waiting):
            if not self._free_rows:
                return
            if pending.cancelled.is_set():
                self._waiting.remove(pending)
                pending.seq.finish("cancelled")
                self._after_step(pending)
                continue
            if self._wait_for_shared_prefill(pending):
                continue
            self._waiting.remove(pending)
            seq = pending.seq
            seq.admitted = time.perf_counter()
            if self.prefix is None:
                seq.row = self._free_rows.pop()
            else:  # the free row that holds the most of the prompt's cached blocks already
                nodes = self.prefix.match(seq.prompt_ids, self._namespace())
                seq.row = self._free_rows.pop(self.prefix.closest_row(nodes, self._free_rows))
                seq.prompt_experts.append(self.prefix.load(nodes, self.cache, seq.row))
                seq.length = seq.cached_tokens = len(nodes) * self.prefix.block
            self._active.append(pending)

    def _wait_for_shared_prefill(self, pending: _Pending) -> bool:
        """Whether `pending` should wait: a sequence being prefilled will compute a prefix of its
        prompt (DEDUP_BLOCKS blocks or more) that the prefix cache can then give it."""
        if self.prefix is None:
            return False
        if pending.prompt_np is None:
            pending.prompt_np = np.asarray(pending.seq.prompt_ids)
        mine = pending.prompt_np
        for other in self._active:
            seq = other.seq
            if seq.prefilled:
                continue
            if other.prompt_np is None:
                other.prompt_np = np.asarray(seq.prompt_ids)
            n = min(len(mine) - 1, len(other.prompt_np))
            differ = np.flatnonzero(mine[:n] != other.prompt_np[:n])
            shared = int(differ[0]) if len(differ) else n
            if shared - seq.length >= DEDUP_BLOCKS * self.prefix.block:
                return True
        return False

    # ---- prefill --------------------------------------------------------------------------------

    def _prefill_step(self, prefilling: list[_Pending], budget: int) -> None:
        """The next chunk of each prompt (in admission order, `budget` tokens in all), one forward."""
        ids, rows, positions, plan = [], [], [], []
        for pending in prefilling:
            seq = pending.seq
            n = min(len(seq.prompt_ids) - seq.length, budget)
            if n <= 0:
                break
            ids += seq.prompt_ids[seq.length : seq.length + n]
            rows += [seq.row] * n
            positions += range(seq.length, seq.length + n)
            plan.append((pending, n))
            budget -= n
        ends = np.cumsum([n for _, n in plan]) - 1
        finishing = [i for i, (p, n) in enumerate(plan) if p.seq.length + n == len(p.seq.prompt_ids)]
        out = self.runner.forward(torch.tensor(ids), torch.tensor(rows), torch.tensor(positions), PREFILL,
                                  logits_at=[int(ends[i]) for i in finishing])
        start = 0
        for i, (pending, n) in enumerate(plan):
            seq = pending.seq
            seq.prompt_experts.append(out.experts_NLk[start : start + n])
            seq.length += n
            start += n
            if self.prefix is not None:
                self.prefix.store(seq.prompt_ids, seq.length, self.cache, seq.row,
                                  torch.cat(seq.prompt_experts), self._namespace())
            if i in finishing:
                seq.prefill_seconds = time.perf_counter() - seq.admitted
                seq.accept(out.logits[finishing.index(i)].unsqueeze(0).float(), drafts=[])
                self._after_step(pending)

    # ---- decode ---------------------------------------------------------------------------------

    def _decode_step(self, decoding: list[_Pending]) -> None:
        seqs = [p.seq for p in decoding]
        # A fused step over several sequences already shares its weight reads; a draft would only
        # add tokens (each ~0.55 of a step at 7k positions: attention is per token).
        lone = self.fused is None or len(seqs) == 1
        drafts = [self._draft(seq) if lone else [] for seq in seqs]
        fed = [1 + len(d) for d in drafts]
        starts = list(np.cumsum([0, *fed[:-1]]))
        ids = [t for seq, d in zip(seqs, drafts) for t in (seq.last_token, *d)]
        rows = [seq.row for seq, n in zip(seqs, fed) for _ in range(n)]
        positions = [seq.length + j for seq, n in zip(seqs, fed) for j in range(n)]
        if self.fused is not None:  # a draft's tokens are rows at consecutive positions of its row
            want = any(seq.params.return_routing for seq in seqs)
            logits_BV, experts_BLk = self.fused.step(ids, rows, positions, want)
        else:
            out = self.runner.forward(torch.tensor(ids), torch.tensor(rows), torch.tensor(positions), DECODE)
            logits_BV, experts_BLk = out.logits, out.experts_NLk
        for pending, draft, start, n in zip(decoding, drafts, starts, fed):
            seq = pending.seq
            used = seq.accept(logits_BV[start : start + n].float(), drafts=draft)
            if seq.params.return_routing and experts_BLk is not None:
                seq.record_routing(experts_BLk[start : start + used])
            seq.length += used
        for pending in decoding:
            self._after_step(pending)

    def _draft(self, seq: Sequence) -> list[int]:
        if not seq.params.use_speculation:
            return []
        if seq.draft_pause > 0:
            seq.draft_pause -= 1
            return []
        return seq.lookup.propose(min(seq.draft_limit, seq.tokens_left - 1, self.max_seq_len - seq.length - 1))

    # ---- leaving --------------------------------------------------------------------------------

    def _after_step(self, pending: _Pending) -> None:
        seq = pending.seq
        event = seq.take_event()
        if event is not None:
            pending.on_event(event)
        if seq.finish_reason is not None:
            if pending in self._active:
                self._active.remove(pending)
                self._free_rows.append(seq.row)
            done = seq.completion()
            done.weight_version = self.weight_version
            pending.on_done(done)

    def _drop_cancelled(self) -> None:
        for pending in list(self._active):
            if pending.cancelled.is_set():
                pending.seq.finish("cancelled")
                self._after_step(pending)


def _check_version(version: object) -> int:
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ValueError(f"a weight version is an integer >= 0, got {version!r}")
    return version
