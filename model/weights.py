"""Weight updates for a live model: named tensors resolved to where they go, checked before anything
is written, prepared (converted to the model's dtype; int4 and int8 matrices re-quantized) and then
applied as plain copies into the tensors the model already computes with.

Names: the checkpoint's Hugging Face names (`model.layers.3.self_attn.q_proj.weight`, ...), the
model's own parameter names (`layers.3.attn.qkv.weight`, `layers.3.moe.experts.w13_EFD`, ...), or
a mix, as long as no two of them write the same weights (model/hf.py's `hf_slots`, `own_slots`).
Any subset: a full state dict, or only the tensors a LoRA merge changed. Values: floating point
(any float dtype, converted to the model's), finite, of the shape the config gives. On a tied
model a `lm_head.weight` is accepted only beside an equal embedding (a tied checkpoint's copy).

On an int4 model (model/quant.py) each updated matrix is re-quantized from the new rows, row by
row, so rows not named keep their quantized values exactly, and the buffers keep their shapes and
storage: the fused C++ step, which holds references to them, computes with the new weights.

An int4 model built with an adapter beside its matrices (model/adapter.py) takes the adapter's
new residuals instead, `<parameter name>.lora_down` / `.lora_up`, copied into the buffers it
keeps them in; merged weights for those matrices are refused (they would add the adapter twice).

    update = WeightUpdate.prepare(model, tensors)   # raises WeightUpdateError, writes nothing
    update.apply()                                   # copies only
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from model.adapter import LowRank, split_residuals
from model.config import ModelConfig
from model.hf import Slot, hf_slots, own_slots
from model.quant import CopyPair, Int4Linear, Int8Linear, QuantizedExperts, RowUpdate
from model.transformer import Transformer

EMBED_NAMES = ("model.embed_tokens.weight", "embed.weight")


class WeightUpdateError(ValueError):
    """The tensors cannot be loaded as given; the message names the tensor. Nothing was written."""


@dataclass
class WeightUpdate:
    copies: list[CopyPair]
    """(destination, source) pairs; applying them is the whole update."""
    names: list[str]
    """The tensors it was prepared from, sorted."""

    @classmethod
    @torch.no_grad()
    def prepare(cls, model: Transformer, tensors: Mapping[str, torch.Tensor]) -> WeightUpdate:
        """Checks every tensor and computes everything the update writes (conversions, int4
        re-quantization) without writing to the model."""
        try:
            tensors, residuals = split_residuals(dict(tensors))
        except ValueError as err:
            raise WeightUpdateError(str(err)) from None
        copies = _residual_copies(model, residuals)
        if residuals and not tensors:
            return cls(copies, sorted(residuals))
        slots = resolve(model.config, tensors)
        dtype, device = model.embed.weight.dtype, model.embed.weight.device
        rows: dict[nn.Module, list[RowUpdate]] = {}
        for name, slot in slots.items():
            value = _checked(name, tensors[name], slot).to(device=device, dtype=dtype)
            _plan(model, name, slot, value, copies, rows)
        for module, module_rows in rows.items():
            if getattr(module, "lora_down", None) is not None:
                raise WeightUpdateError(
                    "the update writes an int4 matrix that carries a checkpoint's LoRA adapter beside it "
                    "(model/adapter.py), which merged weights would add twice; load the checkpoint with "
                    "quantize='none' to update its weights")
            copies += module.requantized(module_rows)
        return cls(copies, sorted([*slots, *residuals]))

    @torch.no_grad()
    def apply(self) -> None:
        for destination, source in self.copies:
            destination.copy_(source)


def resolve(config: ModelConfig, tensors: Mapping[str, torch.Tensor]) -> dict[str, Slot]:
    """Where each named tensor goes; raises WeightUpdateError for no tensors, unknown names, a
    tied head without its embedding, and two names that write the same weights."""
    if not tensors:
        raise WeightUpdateError("no tensors given: send a state dict with at least one tensor")
    known = {**own_slots(config), **hf_slots(config)}
    names = [n for n in tensors if not (config.tie_word_embeddings and n == "lm_head.weight")]
    unknown = sorted(n for n in names if n not in known)
    if unknown:
        raise WeightUpdateError(
            f"unknown tensor names {unknown[:5]}" + (f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else "")
            + "; expected Hugging Face names (model.layers.0.self_attn.q_proj.weight, ...) or the model's own "
            "(layers.0.attn.qkv.weight, ...) for this config"
        )
    if len(names) < len(tensors):
        _check_tied_head(tensors)
    slots = {name: known[name] for name in names}
    _check_disjoint(config, slots)
    return slots


def _residual_copies(model: Transformer, residuals: dict[str, LowRank]) -> list[CopyPair]:
    """Copies of an adapter's new residuals into the int4 matrices that keep them (each checked)."""
    copies: list[CopyPair] = []
    for name, low_rank in residuals.items():
        owner_name, _, attr = name.rpartition(".")
        try:
            owner = model.get_submodule(owner_name)
        except AttributeError:
            owner = None
        if isinstance(owner, Int4Linear) and attr == "weight":
            matrices, downs, ups = [owner], [low_rank.down], [low_rank.up]
        elif isinstance(owner, QuantizedExperts) and attr in ("w13_EFD", "w2_EDF"):
            matrices, downs, ups = list(owner.w13 if attr == "w13_EFD" else owner.w2), low_rank.down, low_rank.up
        else:
            raise WeightUpdateError(f"{name!r}: the model has no int4 matrix there to keep an adapter's residual")
        if len(downs) != len(matrices) or len(ups) != len(matrices):
            raise WeightUpdateError(f"{name!r}: a residual per expert expected ({len(matrices)})")
        for matrix, down, up in zip(matrices, downs, ups):
            if matrix.lora_down is None:
                raise WeightUpdateError(f"{name!r}: this model keeps no adapter beside that matrix (build it "
                                        "with quantize_model(.., adapter=...))")
            for destination, value, part in ((matrix.lora_down, down, "lora_down"), (matrix.lora_up, up, "lora_up")):
                if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(destination.shape):
                    got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                    raise WeightUpdateError(f"'{name}.{part}' is {got}, the model keeps {tuple(destination.shape)}")
                if not value.is_floating_point() or not _all_finite(value):
                    raise WeightUpdateError(f"'{name}.{part}' must hold finite floating-point values")
                copies.append((destination, value.detach().to(destination.dtype)))
    return copies


def _check_tied_head(tensors: Mapping[str, torch.Tensor]) -> None:
    embed = next((tensors[n] for n in EMBED_NAMES if n in tensors), None)
    head = tensors["lm_head.weight"]
    if embed is None or not isinstance(head, torch.Tensor) or not torch.equal(embed, head):
        raise WeightUpdateError(
            "'lm_head.weight': this model ties its output head to the embedding; send "
            "'model.embed_tokens.weight' (a head is accepted only beside an equal embedding)"
        )


def _check_disjoint(config: ModelConfig, slots: dict[str, Slot]) -> None:
    shapes = {name: slot.shape for name, slot in own_slots(config).items()}
    coverage: dict[str, torch.Tensor] = {}
    writers: dict[str, list[str]] = {}
    for name, slot in slots.items():
        counts = coverage.setdefault(slot.param, torch.zeros(shapes[slot.param][:-1], dtype=torch.int16))
        counts[slot.index] += 1
        writers.setdefault(slot.param, []).append(name)
        if int(counts.max()) > 1:
            others = [n for n in writers[slot.param] if n != name]
            raise WeightUpdateError(f"{name!r} and {others} both write {slot.param}: send each weight once")


def _checked(name: str, value: object, slot: Slot) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise WeightUpdateError(f"{name!r} is a {type(value).__name__}, not a tensor")
    if tuple(value.shape) != slot.shape:
        raise WeightUpdateError(f"{name!r} has shape {tuple(value.shape)}, the model's config says {slot.shape}")
    if not value.is_floating_point():
        raise WeightUpdateError(f"{name!r} has dtype {value.dtype}; weights must be floating point")
    if not _all_finite(value):
        raise WeightUpdateError(f"{name!r} holds NaN or infinite values")
    return value.detach()


def _all_finite(value: torch.Tensor) -> bool:
    """NaN and infinities survive a sum, so a finite sum proves every value finite: one fast
    reduction (about 10x faster than an elementwise check here); only a non-finite sum (a bad
    value, or finite values overflowing) takes the exact check."""
    return math.isfinite(float(value.detach().sum())) or bool(torch.isfinite(value).all())


def _plan(
    model: Transformer, name: str, slot: Slot, value: torch.Tensor,
    copies: list[CopyPair], rows: dict[nn.Module, list[RowUpdate]],
) -> None:
    """Adds what writing `value` at `slot` takes: a copy into a parameter, or new rows for a
    quantized matrix (re-quantized once per matrix, after all its rows are known)."""
    owner_name, _, attr = slot.param.rpartition(".")
    owner = model.get_submodule(owner_name) if owner_name else model
    param = getattr(owner, attr, None)
    if isinstance(param, torch.Tensor):
        copies.append((param[slot.index], value))
        if slot.param == "embed.weight" and isinstance(model.lm_head, Int8Linear):  # a tied int8 head
            rows.setdefault(model.lm_head, []).append((slice(None), value))
    elif isinstance(owner, (Int4Linear, Int8Linear)):
        rows.setdefault(owner, []).append((slot.index[0] if slot.index else slice(None), value))
    elif isinstance(owner, QuantizedExperts):
        matrices = owner.w13 if attr == "w13_EFD" else owner.w2
        if not slot.index:
            for e, matrix in enumerate(matrices):
                rows.setdefault(matrix, []).append((slice(None), value[e]))
        else:
            where = slot.index[1] if len(slot.index) > 1 else slice(None)
            rows.setdefault(matrices[slot.index[0]], []).append((where, value))
    else:
        raise WeightUpdateError(f"{name!r}: the model holds {slot.param} as {type(owner).__name__}, which updates do not support")
