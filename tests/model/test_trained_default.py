"""composer-mini-trained from the adapter the repository commits: a compact (int8) adapter reads
back as its fp32 original within its rounding, in both readers; `merge_adapter` and
`ensure_trained_model` build the served checkpoint from a base and an adapter once; and the
committed adapter fits composer-mini (model/adapter.py, model/home.py).

Run: .venv/bin/python -m pytest tests/model/test_trained_default.py
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from model import home
from model.adapter import (
    ADAPTER_CONFIG,
    ADAPTER_FILE,
    compact_adapter,
    read_adapter,
    read_adapter_tensors,
)
from model.adapter import main as adapter_cli
from model.config import ModelConfig
from model.hf import load_model, save_model
from model.transformer import Transformer

RANK, ALPHA = 4, 8.0
TARGETS = ("attn.qkv.weight", "attn.o_proj.weight", "moe.experts.w13_EFD", "moe.experts.w2_EDF")


def write_adapter(model: Transformer, directory, seed: int = 5) -> None:
    """An fp32 adapter as training/lora.py saves it, with a product about a tenth of the weights."""
    gen = torch.Generator().manual_seed(seed)
    tensors, names = {}, []
    for i in range(model.config.num_layers):
        for target in TARGETS:
            name = f"layers.{i}.{target}"
            *lead, out_features, in_features = model.get_parameter(name).shape
            tensors[f"{name}.lora_A"] = torch.randn(*lead, RANK, in_features, generator=gen) / in_features**0.5
            tensors[f"{name}.lora_B"] = torch.randn(*lead, out_features, RANK, generator=gen) * 0.01
            names.append(name)
    directory.mkdir(parents=True)
    save_file(tensors, str(directory / ADAPTER_FILE))
    (directory / ADAPTER_CONFIG).write_text(json.dumps({"r": RANK, "lora_alpha": ALPHA, "target_parameters": names}))


@pytest.fixture
def base_and_adapter(tmp_path):
    """(a debug checkpoint with a tokenizer file, the model, an fp32 adapter for it)."""
    model = Transformer(ModelConfig.debug()).init_weights(seed=3).eval()
    base = save_model(model, tmp_path / "base")
    (base / "tokenizer.json").write_text('{"model": "bytes"}')
    write_adapter(model, tmp_path / "adapter")
    return base, model, tmp_path / "adapter"


def test_a_compact_adapter_stores_int8_factors_and_keeps_the_product(base_and_adapter, tmp_path):
    _, model, fp32 = base_and_adapter
    compact = compact_adapter(fp32, tmp_path / "compact")
    stored = load_file(compact / ADAPTER_FILE)
    # One byte a factor element, and one fp32 scale per rank component (an A row, a B column).
    assert all(v.dtype == torch.int8 for k, v in stored.items() if not k.endswith(".scale"))
    assert stored["layers.0.moe.experts.w13_EFD.lora_A.scale"].shape == (model.config.num_experts, RANK, 1)
    assert stored["layers.0.moe.experts.w13_EFD.lora_B.scale"].shape == (model.config.num_experts, 1, RANK)
    assert json.loads((compact / ADAPTER_CONFIG).read_text())["factors"] == "int8"
    want, got = read_adapter(fp32), read_adapter(compact)
    assert got.keys() == want.keys()
    for name, low_rank in want.items():
        error = (got[name].delta() - low_rank.delta()).norm() / low_rank.delta().norm()
        assert 0 < error < 0.01, name  # rounded, by under 1% of the change
    # training/lora.py's reader dequantizes the same way: the trainer can resume from it.
    from training.lora import load_adapter, lora_state_dict

    loaded = lora_state_dict(load_adapter(Transformer(ModelConfig.debug()).init_weights(seed=3), compact))
    for key, factor in read_adapter_tensors(compact).items():
        torch.testing.assert_close(loaded[key], factor)


def test_an_int8_factor_without_its_scale_is_named(base_and_adapter, tmp_path, capsys):
    _, _, fp32 = base_and_adapter
    compact = tmp_path / "compact"
    assert adapter_cli(["compact", str(fp32), str(compact)]) == 0  # python -m model.adapter compact
    assert adapter_cli(["compact", str(tmp_path / "absent"), str(tmp_path / "x")]) == 2
    assert "no adapter config" in capsys.readouterr().err
    tensors = load_file(compact / ADAPTER_FILE)
    del tensors["layers.1.attn.qkv.weight.lora_B.scale"]
    save_file(tensors, str(compact / ADAPTER_FILE))
    with pytest.raises(ValueError, match=r"layers\.1\.attn\.qkv\.weight\.lora_B is int8 but its .*\.scale is missing"):
        read_adapter(compact)


def test_the_trained_model_is_built_once_from_the_base_and_the_adapter(base_and_adapter, tmp_path, monkeypatch):
    base, model, fp32 = base_and_adapter
    monkeypatch.setenv("COMPOSER_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(home, "ensure_default_model", lambda: base)
    monkeypatch.setattr(home, "TRAINED_ADAPTER", fp32)
    assert not home.trained_model_dir().exists()  # nothing built until an engine loads it
    built = home.checkpoint_dir(home.served_model(None, None))  # what Engine.from_pretrained loads
    assert built == home.trained_model_dir() and (built / home.BUILT_FROM).is_file()
    assert home.checkpoint_dir(None) == base and home.checkpoint_dir(str(base)) == base
    assert (built / "tokenizer.json").read_text() == '{"model": "bytes"}'
    assert (built / "adapter" / ADAPTER_FILE).read_bytes() == (fp32 / ADAPTER_FILE).read_bytes()
    trained = load_model(built)
    for name, low_rank in read_adapter(fp32).items():
        torch.testing.assert_close(trained.get_parameter(name), model.get_parameter(name) + low_rank.delta())
    untouched = "layers.0.moe.router.weight"
    assert torch.equal(trained.get_parameter(untouched), model.get_parameter(untouched))
    # Built once: a second call (another editor starting) keeps it.
    stamp = (built / "model.safetensors").stat().st_mtime_ns
    assert home.ensure_trained_model(fp32) == built and (built / "model.safetensors").stat().st_mtime_ns == stamp
    # A newer committed adapter (a pull) rebuilds it; a checkpoint you trained is never replaced.
    newer = tmp_path / "newer"
    write_adapter(model, newer, seed=6)
    home.ensure_trained_model(newer)
    assert (built / "adapter" / ADAPTER_FILE).read_bytes() == (newer / ADAPTER_FILE).read_bytes()
    yours = save_model(model, tmp_path / "yours")
    (yours / "tokenizer.json").write_text("{}")
    home.install_trained(yours)
    home.ensure_trained_model(fp32)
    assert not (built / "adapter").exists() and (built / "tokenizer.json").read_text() == "{}"
    with pytest.raises(FileNotFoundError, match="no such adapter"):
        home.merge_adapter(base, tmp_path / "absent", tmp_path / "out")


def test_the_committed_adapter_fits_composer_mini(composer_mini_dir):
    """What `make run` merges: every factor pair matches a composer-mini weight's shape."""
    config = json.loads((home.TRAINED_ADAPTER / ADAPTER_CONFIG).read_text())
    assert config["factors"] == "int8" and config["base"] == "composer-mini"
    assert (home.TRAINED_ADAPTER / ADAPTER_FILE).stat().st_size < 30e6
    with torch.device("meta"):
        model = Transformer(ModelConfig.load(composer_mini_dir))
    adapter = read_adapter(home.TRAINED_ADAPTER)
    assert len(adapter) == 4 * model.config.num_layers
    for name, low_rank in adapter.items():
        shape = (*low_rank.up.shape[:-1], low_rank.down.shape[-1])
        assert shape == tuple(model.get_parameter(name).shape), name
