"""Checkpoints that survive `kill -9`: each one is written into `step_NNNNNN.tmp/` and renamed into
place only when complete, then `latest` (a one-line file, replaced atomically) points at it.

    ckpt = Checkpointer(run_dir / "checkpoints", keep=2)
    ckpt.save(step, trainer, tokenizer, extra={"buffer": buffer.state()})
    if (path := ckpt.latest()) is not None:
        extra = ckpt.load(path, trainer)
    export_model(trainer.model, tokenizer, run_dir / "final")     # merged weights, HF layout

A checkpoint holds the weights in Hugging Face layout (`model/`: config.json, model.safetensors,
generation_config.json and the tokenizer, loadable by transformers and `vllm serve`) for full
fine-tuning, or the LoRA adapter (`adapter/`, training/lora.py) for LoRA runs (the base model is
named in the run's config; `export_model` writes the merged model at the end), plus
`trainer.pt` (optimizer, step, RNG states, and the caller's `extra`: the buffer's version and
consumed jobs). Older complete checkpoints beyond `keep` are removed after a new one lands.
A run with a KL reference keeps it once, beside them (`reference.safetensors`: the trainer's
`reference_tensors`), never pruned, so a resumed run compares with the same policy.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from model.hf import hf_state_dict, load_hf_state_dict, load_state_dict, save_checkpoint
from training.lora import ADAPTER_FILE, lora_modules, save_adapter

LATEST = "latest"
REFERENCE = "reference.safetensors"


def full_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights under HF names, merged (LoRA) and gathered (FSDP's DTensors)."""
    out = {}
    for name, tensor in hf_state_dict(model).items():
        if hasattr(tensor, "full_tensor"):
            tensor = tensor.full_tensor()
        out[name] = tensor.detach()
    return out


def export_model(model: torch.nn.Module, tokenizer, directory: Path, dtype: torch.dtype = torch.float32,
                 write: bool = True) -> Path:
    """The merged model as an HF-layout directory (what the engine, transformers and vLLM load).
    Under FSDP every rank calls it (the gather) and one writes (`write`)."""
    tensors = full_tensors(model)
    if write:
        save_checkpoint(directory, model.config, tensors, tokenizer, dtype=dtype)
    return directory


class Checkpointer:
    def __init__(self, directory: Path, keep: int = 2, is_writer: bool = True) -> None:
        """`is_writer`: only one rank writes (all ranks must call `save`: FSDP gathers)."""
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.directory = Path(directory)
        self.keep = keep
        self.is_writer = is_writer

    def latest(self) -> Path | None:
        pointer = self.directory / LATEST
        if not pointer.is_file():
            return None
        path = self.directory / pointer.read_text().strip()
        if not (path / "trainer.pt").is_file():
            raise ValueError(f"{pointer} names {path.name}, which is not a complete checkpoint")
        return path

    def save(self, step: int, trainer, tokenizer, extra: dict | None = None) -> Path | None:
        model = trainer.model
        lora = any(True for _ in lora_modules(model))
        tensors = None if lora else full_tensors(model)  # every rank takes part in the gathers
        trainer_state = trainer.state_dict()
        if not self.is_writer:
            return None
        final = self.directory / f"step_{step:06d}"
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if lora:
            save_adapter(model, tmp / "adapter", step=step)
        else:
            save_checkpoint(tmp / "model", model.config, tensors, tokenizer)
        state = {"trainer": trainer_state, "extra": extra or {}, "rng": _rng_state()}
        torch.save(state, tmp / "trainer.pt")
        _fsync_tree(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        pointer_tmp = self.directory / (LATEST + ".tmp")
        pointer_tmp.write_text(final.name + "\n")
        os.replace(pointer_tmp, self.directory / LATEST)
        self._prune(final)
        return final

    def load_weights(self, path: Path, model: torch.nn.Module) -> None:
        """The checkpoint's weights into `model`: the adapter into its LoRA factors, or the full
        weights (before FSDP shards the model: every rank reads the same files)."""
        if (path / "adapter").is_dir():
            from safetensors.torch import load_file

            tensors = load_file(path / "adapter" / ADAPTER_FILE)
            with torch.no_grad():
                for name, delta in lora_modules(model):
                    delta.lora_A.copy_(tensors[f"{name}.lora_A"])
                    delta.lora_B.copy_(tensors[f"{name}.lora_B"])
        else:
            load_hf_state_dict(model, load_state_dict(path / "model"), source=str(path / "model"))

    def load_state(self, path: Path, trainer) -> dict:
        """Optimizer, step and RNG states; returns the saved `extra`."""
        state = torch.load(path / "trainer.pt", weights_only=False)
        trainer.load_state_dict(state["trainer"])
        _set_rng_state(state["rng"])
        return state["extra"]

    def load(self, path: Path, trainer) -> dict:
        """Both, for one process."""
        self.load_weights(path, trainer.model)
        return self.load_state(path, trainer)

    def save_reference(self, trainer) -> None:
        """The trainer's KL reference, written atomically (every rank calls it: FSDP gathers)."""
        from safetensors.torch import save_file

        tensors = trainer.reference_tensors()
        if not self.is_writer:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / (REFERENCE + ".tmp")
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / REFERENCE)

    def load_reference(self, trainer) -> bool:
        """The saved KL reference into the trainer; False when the run has none yet."""
        from safetensors.torch import load_file

        path = self.directory / REFERENCE
        if not path.is_file():
            return False
        trainer.load_reference(load_file(path))
        return True

    def _prune(self, newest: Path) -> None:
        done = sorted(p for p in self.directory.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
        for old in done[: -self.keep]:
            if old != newest:
                shutil.rmtree(old, ignore_errors=True)


def _rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def _fsync_tree(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
