"""composer-mini-trained: installing a trained checkpoint and which model the editor-facing
commands serve (model/home.py's `install_trained`, `served_model` and `checkpoint_dir`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model import home

EARLIER = Path(__file__).parent / "data" / "chat_template-49c8c6b.jinja"
"""model/chat_template.jinja before an assistant turn closed with <|endoftext|><|im_end|>."""


def trained_checkpoint(directory: Path, weights: str = "w1") -> Path:
    """A run's `final/` as the trainer writes it: weights, tokenizer, and the LoRA adapter."""
    (directory / "adapter").mkdir(parents=True)
    (directory / "config.json").write_text("{}")
    (directory / "tokenizer.json").write_text("{}")
    (directory / "model.safetensors").write_text(weights)
    (directory / "adapter" / "adapter_config.json").write_text(json.dumps({"r": 16}))
    return directory


@pytest.fixture
def composer_home(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("COMPOSER_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_served_model_is_composer_mini_trained_and_an_install_takes_its_place(composer_home, tmp_path):
    trained = composer_home / "models" / "composer-mini-trained"
    assert home.served_model(None, None) == str(trained)  # built when an engine first loads it
    installed = home.install_trained(trained_checkpoint(tmp_path / "run" / "final"))
    assert installed == trained and home.served_model(None, None) == str(installed)
    # Your install is what loads: no build over it (a checkpoint_dir of it is just it).
    assert home.checkpoint_dir(str(installed)) == installed
    assert (installed / "model.safetensors").read_text() == "w1"
    assert (installed / "adapter" / "adapter_config.json").read_text() == '{"r": 16}'
    # An explicit model wins, and an endpoint picks its own when none is named.
    assert home.served_model("/ckpt", None) == "/ckpt"
    assert home.served_model(None, "http://127.0.0.1:8000/v1") is None


def test_install_keeps_its_version_when_the_run_rewrites_its_export(composer_home, tmp_path):
    final = trained_checkpoint(tmp_path / "final", weights="old")
    installed = home.install_trained(final)
    rewritten = final / ".model.safetensors.tmp"
    rewritten.write_text("new")
    rewritten.replace(final / "model.safetensors")  # how checkpoints are written: by rename
    assert (installed / "model.safetensors").read_text() == "old"
    home.install_trained(final)
    assert (installed / "model.safetensors").read_text() == "new"


def test_install_refuses_an_incomplete_checkpoint_and_keeps_the_installed_one(composer_home, tmp_path, capsys):
    installed = home.install_trained(trained_checkpoint(tmp_path / "good"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="not a complete checkpoint"):
        home.install_trained(broken)
    assert home.main(["install-trained", str(broken)]) == 2
    assert "not a complete checkpoint" in capsys.readouterr().err
    assert home.is_complete_checkpoint(installed) and home.served_model(None, None) == str(installed)


def test_composer_lsp_serves_composer_mini_trained(composer_home, tmp_path, monkeypatch):
    from server import cli

    seen = {}

    def serve_ws(args, settings) -> int:
        seen["model"] = settings.model
        return 0

    monkeypatch.setattr(cli, "_serve_ws", serve_ws)
    workspace = tmp_path / "repo"
    workspace.mkdir()
    argv = ["--ws", "127.0.0.1:0", "--workspace", str(workspace), "--allow-unsandboxed"]
    assert cli.main(argv) == 0 and seen.pop("model") == str(home.trained_model_dir())
    assert cli.main([*argv, "--model", "/ckpt"]) == 0 and seen.pop("model") == "/ckpt"


def test_an_install_takes_the_current_composer_mini_template_and_keeps_another_models(composer_home, tmp_path):
    from model.tokenizer import CHAT_TEMPLATE_PATH

    current = CHAT_TEMPLATE_PATH.read_text()
    earlier = EARLIER.read_text()  # a run exported before it changed
    final = trained_checkpoint(tmp_path / "final")
    (final / "chat_template.jinja").write_text(earlier)
    (final / "tokenizer_config.json").write_text(json.dumps({"chat_template": earlier, "eos_token": "<|im_end|>"}))
    installed = home.install_trained(final)
    assert (installed / "chat_template.jinja").read_text() == current  # what vLLM and the engine render
    assert json.loads((installed / "tokenizer_config.json").read_text()) == {"chat_template": current,
                                                                              "eos_token": "<|im_end|>"}
    assert (final / "chat_template.jinja").read_text() == earlier  # the run's own files are not touched
    other = trained_checkpoint(tmp_path / "qwen")
    (other / "chat_template.jinja").write_text("{%- for m in messages %}{{ m.content }}{% endfor %}")
    home.install_trained(other)
    assert (installed / "chat_template.jinja").read_text().startswith("{%- for m")
    edited = trained_checkpoint(tmp_path / "edited")  # a composer-mini template changed on purpose
    (edited / "chat_template.jinja").write_text(current.replace("SmolLM", "Composer"))
    home.install_trained(edited)
    assert "named Composer" in (installed / "chat_template.jinja").read_text()
