"""Low-rank (LoRA) adapters for the MiniLM embedder: a small file of weight deltas, merged into
the model's linear layers when it loads, so a tuned embedder costs nothing extra per text.

    adapter = load_adapter(DEFAULT_ADAPTER)          # tensors + metadata, checked
    merge_adapter(sentence_transformer, adapter)     # W += B @ A for every adapted layer
    adapter.tag                                      # "code-3f2a9c1e": part of the embedder's name

File format (safetensors): for each adapted `torch.nn.Linear` named `m` in the BERT module,
`m.lora_A` (rank x in) and `m.lora_B` (out x rank), float16; metadata `base` (the model the
deltas are for), `rank`, and how it was made (training/embedder.py writes it). The tag is the
file's SHA-256 prefix, so an index built with another adapter is rebuilt, never mixed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent.retrieval.exceptions import EmbeddingError

DEFAULT_ADAPTER = Path(__file__).parent / "adapters" / "minilm-code.safetensors"
"""The bundled adapter: all-MiniLM-L6-v2 tuned on docstring/code pairs (training/embedder.py)."""

BASE_MODEL = "all-MiniLM-L6-v2"


@dataclass(frozen=True)
class Adapter:
    tag: str
    """"code-" and the first 8 hex digits of the file's SHA-256."""
    deltas: dict[str, tuple[np.ndarray, np.ndarray]]
    """Linear module name -> (A, B) as float32."""
    metadata: dict[str, str]


def load_adapter(path: str | Path) -> Adapter:
    """Reads and checks an adapter file; EmbeddingError says what is wrong with it."""
    from safetensors import SafetensorError
    from safetensors.numpy import load

    path = Path(path)
    try:
        raw = path.read_bytes()
        tensors = load(raw)
        # The header (after its 8-byte length) is JSON; the metadata is its "__metadata__".
        header = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
        metadata = dict(header.get("__metadata__") or {})
    except (OSError, SafetensorError, ValueError) as err:
        raise EmbeddingError(f"cannot read the embedder adapter {path}: {err}") from err
    if metadata.get("base") != BASE_MODEL:
        raise EmbeddingError(f"the adapter {path} is for {metadata.get('base')!r}, not {BASE_MODEL}")
    deltas: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for key in tensors:
        if not key.endswith(".lora_A"):
            continue
        module = key.removesuffix(".lora_A")
        a, b = tensors[key], tensors.get(module + ".lora_B")
        if b is None or a.ndim != 2 or b.ndim != 2 or b.shape[1] != a.shape[0]:
            raise EmbeddingError(f"the adapter {path} has mismatched factors for {module}")
        deltas[module] = (a.astype(np.float32), b.astype(np.float32))
    if not deltas:
        raise EmbeddingError(f"the adapter {path} holds no LoRA factors")
    return Adapter("code-" + hashlib.sha256(raw).hexdigest()[:8], deltas, metadata)


def merge_adapter(model: Any, adapter: Adapter) -> None:
    """Adds B @ A to the weight of each adapted linear layer of a loaded SentenceTransformer."""
    import torch

    bert = model[0].auto_model
    modules = dict(bert.named_modules())
    with torch.no_grad():
        for name, (a, b) in adapter.deltas.items():
            layer = modules.get(name)
            if not isinstance(layer, torch.nn.Linear) or layer.weight.shape != (b.shape[0], a.shape[1]):
                raise EmbeddingError(f"the adapter's layer {name} does not fit {BASE_MODEL}")
            layer.weight += torch.from_numpy(b @ a).to(layer.weight.device, layer.weight.dtype)


def save_adapter(path: str | Path, deltas: dict[str, tuple[np.ndarray, np.ndarray]],
                 metadata: dict[str, str]) -> None:
    """Writes an adapter atomically (float16 factors)."""
    from safetensors.numpy import save

    tensors = {}
    for name, (a, b) in deltas.items():
        tensors[f"{name}.lora_A"] = np.ascontiguousarray(a, np.float16)
        tensors[f"{name}.lora_B"] = np.ascontiguousarray(b, np.float16)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(save(tensors, metadata={"base": BASE_MODEL, **metadata}))
    tmp.replace(path)
