"""Fixtures of the server tests: a small workspace and the scripted model endpoint."""

from __future__ import annotations

import pytest
from scripted_model import ScriptedModel


@pytest.fixture
def workspace(tmp_path):
    """A workspace with one file, hello.py, that prints hello."""
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    (root / "hello.py").write_text("print('hello')\n")
    return root


@pytest.fixture
def model():
    """The scripted model; tests set `model.script` to what it should answer."""
    with ScriptedModel([]) as m:
        yield m
