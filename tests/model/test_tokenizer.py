"""model/tokenizer.py against transformers (its GGUF tokenizer, and AutoTokenizer on our saved files),
streaming detokenisation properties, and the chat template against apply_chat_template.

Run: .venv/bin/python -m pytest tests/model/test_tokenizer.py
"""

from __future__ import annotations

import json

import pytest
import regex
import transformers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.gguf_import import bundled_gguf_path
from model.tokenizer import IncrementalDecoder, Tokenizer

TEXTS = [
    "Hello, world!",
    "def add(a, b):\n    return a + b\n\n\nprint(add(2, 40))\n",
    "for (int i = 0; i < 10; ++i) {\n\tx[i] = i * 3.14159;\n}",
    "12345 + 678 = 13023; 0x1F, 1e-5, v2.0.1, 3rd",
    "  leading, trailing   ",
    "tabs\tand\nnewlines\r\nmixed\n\n\n",
    "x  1",
    "a\n\n 3",
    "   42   ",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\ud55c\uad6d\uc5b4 \u0420\u043e\u0441\u0441\u0438\u044f \u0645\u0631\u062d\u0628\u0627",
    "Emoji: \U0001f600\U0001f44d\U0001f3fd\U0001f1fa\U0001f1f8 and \u2764\ufe0f",
    "\u0663\u0664 \u00b2\u00b3 \u00bd \u2167",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><file_sep>src/main.py<|im_end|>",
    "I'm sure they'll say it's fine, don't you think?",
    "",
]
LOSSY = "a\x04b\U00040000c"  # bytes the vocabulary lacks are dropped, by us as by transformers

# transformers' GGUF loader keeps GPT-2's plain byte-level regex for pre-tokenizer `smollm` (it has
# no entry for it), which sends a space along with the number after it; llama.cpp and HF SmolLM2
# split digits off first. That changes the ids of a whitespace run before a digit ("x  1") and of a
# space before a non-ASCII numeral (" \u00b2": the vocabulary has a token for it).
_DIGIT_SPLIT_MATTERS = regex.compile(r"\s\s\p{N}|\s(?![0-9])\p{N}")


def llama_cpp_reference(hf_gguf, text: str) -> list[int]:
    """llama.cpp's `smollm` pre-tokenisation spelled out: isolate every \\p{N}, then GPT-2 BPE
    (transformers' GGUF tokenizer) on each piece."""
    pieces = [p for p in regex.split(r"(\p{N})", text) if p]
    return [i for p in pieces for i in hf_gguf.encode(p, add_special_tokens=False)]


@pytest.fixture(scope="module")
def reader():
    from gguf import GGUFReader

    return GGUFReader(bundled_gguf_path())


@pytest.fixture(scope="module")
def tok(reader) -> Tokenizer:
    return Tokenizer.from_gguf_metadata(reader)


@pytest.fixture(scope="module")
def hf_gguf():
    path = bundled_gguf_path()
    return transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


@pytest.fixture(scope="module")
def saved_dir(tok, tmp_path_factory):
    return tok.save(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def hf_saved(saved_dir):
    return transformers.AutoTokenizer.from_pretrained(saved_dir)


def test_ids_match_transformers_gguf_tokenizer(tok, hf_gguf):
    compared = 0
    for text in [*TEXTS, LOSSY]:
        ours = tok.encode(text)
        assert ours == llama_cpp_reference(hf_gguf, text), text
        if not _DIGIT_SPLIT_MATTERS.search(text):
            assert ours == hf_gguf.encode(text, add_special_tokens=False), text
            compared += 1
    assert compared >= len(TEXTS) - 4
    assert tok.encode("x  1") == [104, 256, 33]  # "x", "  ", "1": the digit split first
    assert tok.decode(tok.encode(LOSSY)) == "ab\ufffd\ufffd\ufffdc"  # lead byte F1 dropped


def test_special_tokens_and_vocabulary(tok, hf_gguf):
    assert tok.vocab_size == 49152 == len(hf_gguf)
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 2)
    assert tok.stop_token_ids == [0, 2]  # <|endoftext|>, <|im_end|>
    assert tok.special_token_ids == list(range(17))
    assert tok.encode("<|im_end|>") == [2]
    assert tok.encode("<|im_start|>", add_special_tokens=True) == [1]  # the GGUF adds no BOS
    assert tok.decode([1, *tok.encode("hello"), 2], skip_special_tokens=True) == "hello"
    with pytest.raises(ValueError, match="49152"):
        tok.decode([49152])
    assert tok.encode("a\ud800b") == tok.encode("a\ufffdb")  # a lone surrogate, as JSON can carry


def test_autotokenizer_loads_saved_files_with_same_ids(tok, hf_saved, saved_dir):
    assert hf_saved.is_fast
    for text in TEXTS:
        ids = tok.encode(text)
        assert hf_saved.encode(text, add_special_tokens=False) == ids, text
        assert hf_saved.decode(ids) == tok.decode(ids) == text
    assert (hf_saved.bos_token_id, hf_saved.eos_token_id, hf_saved.pad_token_id) == (1, 2, 2)
    assert hf_saved.chat_template == tok.chat_template
    config = json.loads((saved_dir / "tokenizer_config.json").read_text())
    assert config["chat_template"] == (saved_dir / "chat_template.jinja").read_text()
    assert json.loads((saved_dir / "special_tokens_map.json").read_text())["eos_token"] == "<|im_end|>"


def test_from_dir_round_trip(tok, saved_dir):
    again = Tokenizer.from_dir(saved_dir)
    assert [again.encode(t) for t in TEXTS] == [tok.encode(t) for t in TEXTS]
    assert again.chat_template == tok.chat_template
    assert (again.stop_token_ids, again.special_token_ids) == (tok.stop_token_ids, tok.special_token_ids)
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.json"):
        Tokenizer.from_dir(saved_dir / "nowhere")


def test_from_plain_metadata_dict_and_errors(tok, reader):
    fields = {k: f.contents() for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    plain = Tokenizer.from_gguf_metadata(fields)
    assert [plain.encode(t) for t in TEXTS] == [tok.encode(t) for t in TEXTS]
    with pytest.raises(ValueError, match="'llama'"):
        Tokenizer.from_gguf_metadata(fields | {"tokenizer.ggml.model": "llama"})
    with pytest.raises(ValueError, match="'qwen2'"):
        Tokenizer.from_gguf_metadata(fields | {"tokenizer.ggml.pre": "qwen2"})


def test_token_bytes_and_strings(tok):
    strings = tok.token_strings()
    singles = tok.backend.decode_batch([[i] for i in range(tok.vocab_size)], skip_special_tokens=False)
    assert strings == singles
    assert strings[2] == "<|im_end|>" and tok.id_to_bytes[2] == b"<|im_end|>"
    for text in TEXTS:
        assert b"".join(tok.id_to_bytes[i] for i in tok.encode(text)) == text.encode()
    partial = [i for i, b in enumerate(tok.id_to_bytes) if b and b[0] >= 0x80 and len(b) == 1]
    assert partial and all(strings[i] == "\ufffd" for i in partial)  # lone UTF-8 bytes


def stream(tok: Tokenizer, ids: list[int], skip: bool = False) -> list[str]:
    decoder = IncrementalDecoder(tok, skip_special_tokens=skip)
    return [decoder.feed(i) for i in ids] + [decoder.flush()]


_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_SETTINGS
@given(ids=st.lists(st.integers(0, 49151), max_size=40), skip=st.booleans())
def test_incremental_decoding_of_random_ids_equals_decode(tok, ids, skip):
    assert "".join(stream(tok, ids, skip)) == tok.decode(ids, skip_special_tokens=skip)


# Text drawn mostly from multi-byte scripts, so tokens often end inside a character.
_ALPHABET = st.sampled_from(
    [*"ab 1\n\t<|>", "\u00e9", "\u00df", "\u4e16", "\u754c", "\u65e5", "\ud55c", "\u0645", "\u2764",
                          "\ufe0f", "\U0001f600", "\U0001f44d", "\U0001f3fd", "\U0001f1fa", "\U00020000"]
)


# SmolLM2's vocabulary has no token for 21 bytes: control characters \x04 \x06 \x13 \x14 \x16 \x1d,
# UTF-8 lead bytes F1 and F2 (planes 4 to 11, unassigned), and bytes UTF-8 never uses.
_LACKING = "\x04\x06\x13\x14\x16\x1d"
_ANY_TEXT = st.text(
    st.characters(max_codepoint=0x3FFFF, exclude_characters=_LACKING, exclude_categories=["Cs"]), max_size=30
)


@_SETTINGS
@given(text=st.one_of(st.text(_ALPHABET, max_size=60), _ANY_TEXT))
def test_incremental_decoding_of_real_text_never_breaks_characters(tok, text):
    ids = tok.encode(text)
    pieces = stream(tok, ids)
    assert "".join(pieces) == tok.decode(ids) == text
    assert not any("\ufffd" in p for p in pieces) or "\ufffd" in text


def test_incremental_decoder_holds_back_partial_characters(tok):
    ids = tok.encode("\U0001f600")
    assert len(ids) > 1  # the emoji's four bytes span several tokens
    decoder = tok.incremental_decoder()
    assert [decoder.feed(i) for i in ids[:-1]] == [""] * (len(ids) - 1)
    assert decoder.pending
    assert decoder.feed(ids[-1]) == "\U0001f600" and not decoder.pending
    lone = ids[:1]
    decoder = tok.incremental_decoder()
    assert decoder.feed(lone[0]) == "" and decoder.flush() == "\ufffd" == tok.decode(lone)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decoder.feed(-1)


TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file <path> & return \"text\" (caf\u00e9)",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "run", "description": "Run a shell command",
                                      "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}},
]
CONVERSATIONS = {
    "plain": [{"role": "user", "content": "What is 2+2?"}],
    "system": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"},
               {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "bye"}],
    "tool_calls": [
        {"role": "user", "content": "Read a.py and b.py, then run the tests."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": {"path": "a.py"}}},
            {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"b.py\"}"}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
        {"role": "tool", "tool_call_id": "c2", "content": "print(2)"},
        {"role": "assistant", "content": "Now the tests.", "tool_calls": [
            {"id": "c3", "type": "function", "function": {"name": "run", "arguments": {"cmd": "pytest -q"}}}]},
        {"role": "tool", "tool_call_id": "c3", "content": "1 passed"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "run", "arguments": {"cmd": None, "env": {"A": [1, None]}}}},
            {"type": "function", "function": {"name": "run", "arguments": ""}},
            {"name": "run", "arguments": {"cmd": "ls"}}]},
        {"role": "tool", "content": None},
        {"role": "assistant", "content": "All good."},
        {"role": "user", "content": [{"type": "text", "text": "thanks "}, {"type": "text", "text": "\u2764"}]},
    ],
}


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no-tools", "tools"])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_rendering_equals_transformers(tok, hf_saved, name, tools, add_generation_prompt):
    messages = CONVERSATIONS[name]
    ours = tok.render_chat(messages, tools=tools, add_generation_prompt=add_generation_prompt)
    theirs = hf_saved.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    assert ours == theirs
    ids = hf_saved.apply_chat_template(
        messages, tools=tools, tokenize=True, add_generation_prompt=add_generation_prompt, return_dict=False
    )
    assert tok.encode_chat(messages, tools=tools, add_generation_prompt=add_generation_prompt) == ids


def test_chat_template_layout(tok):
    plain = tok.render_chat(CONVERSATIONS["plain"])
    assert plain == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    text = tok.render_chat(CONVERSATIONS["tool_calls"], tools=TOOLS, add_generation_prompt=False)
    system = text.split("<|im_end|>")[0]
    assert "# Tools" in system and "<tools>\n" + json.dumps(TOOLS[0], ensure_ascii=False) in system
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in system
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "b.py"}}\n</tool_call><|endoftext|><|im_end|>\n'
    ) in text
    assert (
        "<|im_start|>user\n<tool_response>\nprint(1)\n</tool_response>\n"
        "<tool_response>\nprint(2)\n</tool_response><|im_end|>\n"
    ) in text
    assert "<|im_start|>assistant\nNow the tests.\n<tool_call>\n" in text
    assert text.count("<|im_start|>user") == 5  # the request, three tool turns, the thanks
    assert "<|im_start|>user\nthanks \n\u2764<|im_end|>" in text  # text parts joined as vLLM joins them
    with pytest.raises(ValueError, match="empty"):
        tok.render_chat([])


def test_template_needs_no_whitespace_options(tok):
    """Every tag trims its own whitespace, so engines without trim_blocks/lstrip_blocks agree."""
    import jinja2

    from model.tokenizer import _jinja_tojson

    env = jinja2.Environment()
    env.filters["tojson"] = _jinja_tojson
    template = env.from_string(tok.chat_template)
    for messages in CONVERSATIONS.values():
        plain = template.render(messages=messages, tools=TOOLS, add_generation_prompt=True)
        assert plain == tok.render_chat(messages, tools=TOOLS)


def test_tool_calls_render_as_toolcalls_module_writes_them(tok):
    toolcalls = pytest.importorskip("model.toolcalls")
    calls = CONVERSATIONS["tool_calls"][1]["tool_calls"]
    text = tok.render_chat([{"role": "assistant", "tool_calls": calls}], add_generation_prompt=False)
    assert "<|im_start|>assistant\n" + toolcalls.render_tool_calls(calls) + "<|endoftext|><|im_end|>\n" in text


# ---- token-native continuations -----------------------------------------------------------------

CONTINUATIONS = [
    [{"role": "tool", "content": "a\r\nb"}, {"role": "tool", "content": "ü 🙂"}],
    [{"role": "tool", "content": "x"}, {"role": "user", "content": "[harness] tool call 2 is not valid JSON"}],
    [{"role": "user", "content": "next question"}],
    [],
]


@pytest.mark.parametrize("new", CONTINUATIONS)
@pytest.mark.parametrize("ending", ["<|endoftext|>", None])
def test_continuations_extend_a_prompt_exactly_as_the_template_renders_it(tok, new, ending):
    # The harness's replies end with <|endoftext|> (training/demos.py rendered_ids, what the
    # trained model writes); a reply cut off at its limit ends with neither stop token. Either
    # way, the conversation rendered from text (a chat API, a rebuild) is the stream token for token.
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    start = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    answer = 'Sure.\n<tool_call>\n{"name": "read_file", "arguments": {}}\n</tool_call>'
    completion = tok.encode(answer) + ([tok.token_id(ending)] if ending else [])
    more = tok.encode_continuation(new, tools, last_token=completion[-1])
    full = tok.encode_chat([*start, {"role": "assistant", "content": answer}, *new], tools)
    assert tok.encode_chat(start, tools) + completion + more == full
    assert tok.decode(more).startswith("<|im_end|>\n" if ending else "<|endoftext|><|im_end|>\n")


def test_a_reply_that_ends_the_chatml_way_is_closed_once(tok):
    # A model that writes ChatML's <|im_end|> itself (SmolLM2 untrained) gets the rest of the
    # closing, not a second end of turn.
    more = tok.encode_continuation([{"role": "user", "content": "next"}], last_token=tok.token_id("<|im_end|>"))
    assert tok.decode(more) == "\n<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n"


def test_a_template_that_rewrites_history_is_refused(tok):
    from model.tokenizer import TemplateRewritesHistory

    last_two = ("{%- for m in messages[-2:] %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    forgetful = Tokenizer(tok.backend, chat_template=last_two)
    with pytest.raises(TemplateRewritesHistory):
        forgetful.encode_continuation([{"role": "user", "content": "more"}], last_token=tok.eos_token_id)


def test_the_reply_end_and_the_user_turn_opening_come_from_the_template(tok):
    assert tok.reply_end_id == tok.token_id("<|endoftext|>")  # composer-mini's replies end so
    chatml = ("{%- if not messages | selectattr('role', 'equalto', 'user') | list %}"
              "{{ raise_exception('No user query found in messages.') }}{% endif %}"  # as Qwen3's does
              "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
              "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    plain = Tokenizer(tok.backend, chat_template=chatml)
    assert plain.reply_end_id == tok.token_id("<|im_end|>")  # SmolLM2's own ChatML: the EOS
    assert plain.decode(plain.user_turn_opening()) == "<|im_start|>user"


def test_a_checkpoint_with_an_earlier_composer_mini_template_renders_with_the_current_one(tok):
    from pathlib import Path

    from model.tokenizer import CHAT_TEMPLATE_PATH

    earlier = (Path(__file__).parent / "data" / "chat_template-49c8c6b.jinja").read_text()
    old = Tokenizer(tok.backend, chat_template=earlier)  # a run's export from before the change
    assert old.chat_template == CHAT_TEMPLATE_PATH.read_text() and old.reply_end_id == tok.token_id("<|endoftext|>")
    mixtral = "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    assert Tokenizer(tok.backend, chat_template=mixtral).reply_end_id == tok.eos_token_id  # no probe: the EOS
