"""The decoding step of one sequence as one C++ call, for int4 models on the CPU.

Eager decoding of composer-mini issues about 2,000 small ATen ops a token from Python, and at
10-15 us each they cost more than the int4 matmuls themselves. model/csrc/fused_decode.cpp runs
the same step (embedding, 30 layers of norm / int4 qkv / rotary / cache write / attention / int4
output projection / router / the chosen experts, final norm and int8 head) in one call: the
reductions and matmuls are the ATen ops the Python path calls and the elementwise work is plain
loops, so its logits are bit-identical to the eager path's (tests/model/test_fused_decode.py).

The extension compiles on first use (20-60 s with g++ and ninja) into
`$COMPOSER_HOME/torch_extensions/` (a directory per torch version and source file) and loads from
there afterwards. When it cannot (no compiler,
a build error) the engine keeps the eager path and says why once on stderr.
`COMPOSER_FUSED_DECODE=0` turns it off.

    from model.fused_decode import FusedDecode
    fused = FusedDecode.build(model, cache)      # model quantized with quantize_model(.., "int4")
    logits_1V = fused.step(token_id, position)   # writes the cache at `position` of row 0

Legend: V vocab, E experts.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import threading
from pathlib import Path

import torch

from model.layers import KVCache
from model.transformer import Transformer

SOURCE = Path(__file__).resolve().parent / "csrc" / "fused_decode.cpp"
ENV_VAR = "COMPOSER_FUSED_DECODE"

_lock = threading.Lock()
_module = None
_error: str | None = None


class FusedDecodeUnavailable(RuntimeError):
    """The extension cannot be built or loaded here, or the model is not one it runs."""


def enabled_by_env() -> bool:
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def build_directory() -> Path:
    """Per torch and Python version (an extension built against another torch must not load) and
    per source file, by its path and content: torch rebuilds whenever the build command or the
    source changes, so checkouts sharing one directory would otherwise rebuild in turn."""
    from model.home import composer_home

    source = hashlib.sha1(str(SOURCE).encode() + b"\0" + SOURCE.read_bytes()).hexdigest()[:12]
    tag = f"torch-{torch.__version__}-py{sys.version_info.major}{sys.version_info.minor}-{source}".replace("+", "_")
    return composer_home() / "torch_extensions" / tag / "fused_decode"


def load_extension():
    """The compiled module (built once per process, and once per machine thanks to the cache
    directory); raises FusedDecodeUnavailable with the reason when it cannot be had."""
    global _module, _error
    with _lock:
        if _module is None and _error is None:
            _module, _error = _compile()
        if _error is not None:
            raise FusedDecodeUnavailable(_error)
        return _module


def _compile():
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return None, f"no C++ compiler ({compiler!r} is not on PATH)"
    try:
        from torch.utils import cpp_extension

        if not cpp_extension.is_ninja_available():
            return None, "ninja is not installed (torch.utils.cpp_extension needs it)"
        from model.home import file_lock

        directory = build_directory()
        directory.mkdir(parents=True, exist_ok=True)
        # An fcntl lock (released if the process dies): torch's own lock file, left behind by a
        # build that was killed, would make every later load wait forever.
        with file_lock(directory):
            (directory / "lock").unlink(missing_ok=True)
            if not (directory / "fused_decode.so").exists():
                print(f"composer: compiling the fused decode step into {directory} (once; 20-60 s)",
                      file=sys.stderr, flush=True)
            module = cpp_extension.load(
                name="fused_decode",
                sources=[str(SOURCE)],
                build_directory=str(directory),
                # No fused multiply-add: rotary's x * cos + r * sin rounds like the eager ops.
                extra_cflags=["-O3", "-ffp-contract=off"],
                verbose=False,
            )
        return module, None
    except Exception as err:  # compiler errors arrive as RuntimeError/OSError/ImportError
        return None, f"building {SOURCE.name} failed: {str(err).strip()[-2000:]}"


def unsupported_reason(model: Transformer) -> str | None:
    """Why the fused step cannot run this model (None when it can): it handles model/quant.py's
    int4 layers with fp32 activations on the CPU, as `quantize_model(model, "int4")` leaves them."""
    from model.quant import Int4Linear, Int8Linear, QuantizedExperts

    if getattr(model, "quantization", "none") != "int4":
        return "the model is not quantized to int4"
    if model.embed.weight.dtype != torch.float32 or model.embed.weight.device.type != "cpu":
        return "the fused step runs fp32 activations on the CPU"
    if not isinstance(model.lm_head, Int8Linear):
        return "the output head is not int8"
    for layer in model.layers:
        attn, moe = layer.attn, layer.moe
        if not (isinstance(attn.qkv, Int4Linear) and isinstance(attn.o_proj, Int4Linear)):
            return "an attention projection is not int4"
        if not isinstance(moe.experts, QuantizedExperts):
            return "the experts are not int4"
        sizes = {w.group_size for w in [attn.qkv, attn.o_proj, *moe.experts.w13, *moe.experts.w2]}
        if len(sizes) != 1:
            return "int4 group sizes differ between matrices"
    return None


class FusedDecode:
    """The C++ decoder bound to one model's weights and one KV cache (no copies: it holds
    references to the same tensors, so the cache it writes is the engine's)."""

    def __init__(self, decoder) -> None:
        self._decoder = decoder

    @classmethod
    def build(cls, model: Transformer, cache: KVCache) -> FusedDecode:
        reason = unsupported_reason(model)
        if reason is not None:
            raise FusedDecodeUnavailable(reason)
        ext = load_extension()
        config = model.config
        decoder = ext.FusedDecoder(
            config.num_heads, config.num_kv_heads, config.head_dim, config.top_k, config.rms_norm_eps,
            model.embed.weight.detach(), model.rotary.cos, model.rotary.sin, model.norm.weight.detach(),
            model.lm_head.q_OI, model.lm_head.scale_O,
        )
        for layer, cache_k, cache_v in zip(model.layers, cache.k, cache.v):
            attn, moe = layer.attn, layer.moe
            experts = moe.experts
            decoder.add_layer(
                layer.attn_norm.weight.detach(), attn.qkv.packed, attn.qkv.scales_and_zeros,
                attn.o_proj.packed, attn.o_proj.scales_and_zeros,
                layer.ffn_norm.weight.detach(), moe.router.weight.detach(),
                [w.packed for w in experts.w13], [w.scales_and_zeros for w in experts.w13],
                [w.packed for w in experts.w2], [w.scales_and_zeros for w in experts.w2],
                attn.qkv.group_size, cache_k, cache_v,
            )
        return cls(decoder)

    def step(self, token: int, position: int, row: int = 0) -> torch.Tensor:
        """Feeds `token` at `position` of cache row `row`, attending to positions [0, position];
        returns the logits (1, V) fp32. Releases the GIL while it runs."""
        return self._decoder.step(token, position, row)

    def profile(self, on: bool = True) -> dict[str, float] | None:
        """Turns per-part timing on or off; returns the seconds accumulated since the last call
        (norm, int4_mm, rotary_cache, attention, router, expert_glue, head)."""
        out = self._decoder.take_profile()
        self._decoder.set_profiling(on)
        return out
