"""The tokenizer: SmolLM2's byte-level BPE (built from the GGUF's metadata or read from a checkpoint's
`tokenizer.json`), streaming detokenisation, and the chat template rendered the way transformers
and vLLM render it.

    from model.tokenizer import Tokenizer
    tok = Tokenizer.from_dir("~/.cache/composer/models/composer-mini")
    ids = tok.encode_chat([{"role": "user", "content": "hi"}])
    stream = tok.incremental_decoder()
    text = "".join(stream.feed(i) for i in ids) + stream.flush()
    completion = [...]                               # the ids the model sampled after `ids`
    more = tok.encode_continuation([{"role": "tool", "content": "ok"}], last_token=completion[-1])
    next_prompt = ids + completion + more            # token-native: no old turn is re-rendered

Try it: `python -m model.tokenizer DIR "some text"` prints the ids and the pieces.

Pre-tokenisation is SmolLM2's (llama.cpp pre-tokenizer `smollm`, the StarCoder family): every digit
is split off on its own, then the GPT-2 byte-level regex runs on the stretches between digits, with
no prefix space. transformers' own GGUF loader drops the digit split for `smollm`, which changes the
ids of a whitespace run before a digit (`"x  1"`) and of a space before a non-ASCII numeral
(`" \u00b2"`); the tests check ours against llama.cpp's rule spelled out.

Token-native conversations (`encode_continuation`): after a completion, the next prompt is the
previous prompt's ids, the completion's ids as sampled, and the encoding of only what the chat
template adds for the new messages: the rest of the assistant turn's closing after the special
token the completion ended with (composer-mini's closing is `<|endoftext|><|im_end|>\n`: after a
reply that ends with `<|endoftext|>`, as the harness's replies do, `<|im_end|>\n`; after one that
ends with `<|im_end|>`, `\n`; after one cut off, all of it), the new messages, and the generation
prompt. The text is found by rendering a fixed probe conversation with and without the new
messages; a template that rewrites earlier turns (the probe is then not a prefix) raises
`TemplateRewritesHistory`. Special tokens split the text, so where the completion ends as the
template closes a reply (composer-mini: `<|endoftext|>`) or is cut off, these ids equal the full
template's encoding: a conversation rendered from text is the stream the model was fed.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors

_SURROGATES = re.compile("[\ud800-\udfff]")
CHAT_TEMPLATE_PATH = Path(__file__).with_name("chat_template.jinja")
EARLIER_TEMPLATES = frozenset({
    "99a96d13bb1a91fe9243385a99ac9cb60ae41b372d3b226defe21909ec49601d",  # f653fa8
    "15bee292aa427c774afda144259acc72e64396dfd8cd9041deecc776c33dec8b",  # 49c8c6b: turns closed with <|im_end|>
})
"""sha256 of model/chat_template.jinja's earlier versions (`git log model/chat_template.jinja`):
a checkpoint written with one renders with the current template (`current_template`)."""
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")
"""Tokens that end a generation: the end of a ChatML turn, and the end of a document."""


def current_template(template: str) -> str:
    """`template`, or composer-mini's current one when `template` is an earlier version of it (a
    checkpoint written before it changed renders as composer-mini renders now)."""
    earlier = hashlib.sha256(template.encode()).hexdigest() in EARLIER_TEMPLATES
    return CHAT_TEMPLATE_PATH.read_text() if earlier else template

# llama.cpp token types (gguf.TokenType): CONTROL tokens are special, USER_DEFINED ones are added
# tokens matched whole in text but not special.
_CONTROL, _USER_DEFINED = 3, 4
# `tokenizer.ggml.pre` values whose pre-tokenizer is "split digits, then GPT-2 byte-level".
_DIGIT_SPLIT_PRE = frozenset({"smollm", "starcoder", "refact", "codeshell"})
_PLAIN_GPT2_PRE = frozenset({"gpt2", "default", "mpt", "olmo"})


@functools.cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet reversed: printable character -> the byte it stands for.

    As GPT-2's `bytes_to_unicode`: printable Latin-1 bytes stand for themselves, the other 68 bytes
    are shifted to U+0100 and up, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars = {chr(b): b for b in printable}
    shift = 0
    for b in range(256):
        if b not in printable:
            chars[chr(256 + shift)] = b
            shift += 1
    return chars


def _field(fields: Any, key: str, default: Any = None) -> Any:
    """A metadata value from a GGUFReader, its `fields` mapping, or a plain dict of values."""
    fields = getattr(fields, "fields", fields)
    if key not in fields:
        return default
    value = fields[key]
    return value.contents() if hasattr(value, "contents") else value


def smollm_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """Digits one by one, then the GPT-2 byte-level regex, no prefix space (HF SmolLM2's own)."""
    return pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])


def _jinja_tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
                  sort_keys: bool = False) -> str:
    # transformers' override: jinja's own filter HTML-escapes, which chat templates must not do.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


@functools.lru_cache(maxsize=8)
def compile_chat_template(source: str) -> jinja2.Template:
    """The template compiled in transformers' environment (same options, filters and globals)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _jinja_tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


_PROBE = "\u2063composer-probe\u2063"
"""The probe assistant turn's content: found back in the rendered text, never in the template."""


class TemplateRewritesHistory(ValueError):
    """The chat template renders earlier turns differently once new messages follow them, so the
    next prompt cannot extend the previous one token for token."""


def _plain(value: Any) -> Any:
    """Plain JSON-like data: mappings to dicts, sequences to lists, pydantic models dumped."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    return value


class Tokenizer:
    """A `tokenizers.Tokenizer` plus the special tokens and chat template that go with it."""

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        bos_token: str = "<|im_start|>",
        eos_token: str = "<|im_end|>",
        pad_token: str | None = "<|im_end|>",
        unk_token: str | None = "<|endoftext|>",
        chat_template: str | None = None,
    ) -> None:
        self.backend = backend
        self.bos_token, self.eos_token = bos_token, eos_token
        self.pad_token, self.unk_token = pad_token, unk_token
        self.chat_template = (current_template(chat_template) if chat_template is not None
                              else CHAT_TEMPLATE_PATH.read_text())
        for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
            token = getattr(self, name)
            if token is not None and backend.token_to_id(token) is None:
                raise ValueError(f"{name} {token!r} is not in the vocabulary")
        added = backend.get_added_tokens_decoder()
        self.special_token_ids: list[int] = sorted(i for i, t in added.items() if t.special)
        self.vocab_size: int = backend.get_vocab_size(with_added_tokens=True)
        self._id_to_bytes: list[bytes] | None = None

    # ---- construction ---------------------------------------------------------------------------

    @classmethod
    def from_gguf_metadata(cls, reader_or_fields: Any) -> Tokenizer:
        """Builds the byte-level BPE a GGUF describes (`tokenizer.ggml.*`: tokens, merges, types)."""
        kind = _field(reader_or_fields, "tokenizer.ggml.model")
        if kind != "gpt2":
            raise ValueError(f"GGUF tokenizer.ggml.model is {kind!r}; only 'gpt2' (byte-level BPE) is supported")
        tokens = list(_field(reader_or_fields, "tokenizer.ggml.tokens") or [])
        merges = list(_field(reader_or_fields, "tokenizer.ggml.merges") or [])
        types = list(_field(reader_or_fields, "tokenizer.ggml.token_type") or [1] * len(tokens))
        if not tokens or not merges or len(types) != len(tokens):
            raise ValueError(
                f"GGUF tokenizer metadata is incomplete: {len(tokens)} tokens, {len(merges)} merges, "
                f"{len(types)} token types"
            )
        pre = _field(reader_or_fields, "tokenizer.ggml.pre", "default")
        if pre in _DIGIT_SPLIT_PRE:
            pre_tokenizer = smollm_pre_tokenizer()
        elif pre in _PLAIN_GPT2_PRE:
            pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        else:
            raise ValueError(
                f"GGUF tokenizer.ggml.pre is {pre!r}; supported: {sorted(_DIGIT_SPLIT_PRE | _PLAIN_GPT2_PRE)}"
            )
        vocab = {token: i for i, token in enumerate(tokens)}
        pairs = [tuple(m.split(" ")) for m in merges]
        bad = next((m for m, p in zip(merges, pairs) if len(p) != 2), None)
        if bad is not None:
            raise ValueError(f"GGUF merge {bad!r} is not two tokens separated by one space")
        backend = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
        backend.pre_tokenizer = pre_tokenizer
        backend.decoder = decoders.ByteLevel()
        backend.post_processor = processors.ByteLevel(trim_offsets=False)
        backend.add_special_tokens([
            AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k == _CONTROL
        ])
        backend.add_tokens([
            AddedToken(t, special=False, normalized=False) for t, k in zip(tokens, types) if k == _USER_DEFINED
        ])

        def token(key: str) -> str | None:
            index = _field(reader_or_fields, f"tokenizer.ggml.{key}_token_id")
            return None if index is None else tokens[int(index)]

        return cls(
            backend, bos_token=token("bos") or "<|im_start|>", eos_token=token("eos") or "<|im_end|>",
            pad_token=token("padding"), unk_token=token("unknown"),
        )

    @classmethod
    def from_dir(cls, path: str | Path) -> Tokenizer:
        """Reads `tokenizer.json`, `tokenizer_config.json` and `chat_template.jinja` from a checkpoint."""
        path = Path(path).expanduser()
        file = path / "tokenizer.json"
        if not file.is_file():
            raise FileNotFoundError(f"{file}: no tokenizer.json; is {path} a checkpoint directory?")
        backend = tokenizers.Tokenizer.from_file(str(file))
        config_file = path / "tokenizer_config.json"
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}
        template_file = path / "chat_template.jinja"
        template = template_file.read_text() if template_file.is_file() else config.get("chat_template")

        def token(name: str, default: str | None) -> str | None:
            value = config.get(name, default)
            return value.get("content") if isinstance(value, dict) else value

        return cls(
            backend, bos_token=token("bos_token", "<|im_start|>"), eos_token=token("eos_token", "<|im_end|>"),
            pad_token=token("pad_token", None), unk_token=token("unk_token", None), chat_template=template,
        )

    def save(self, path: str | Path) -> Path:
        """Writes the files transformers' AutoTokenizer (and so vLLM) loads as a fast tokenizer."""
        path = Path(path).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(path / "tokenizer.json"))
        special = {"bos_token": self.bos_token, "eos_token": self.eos_token}
        special |= {k: v for k, v in (("pad_token", self.pad_token), ("unk_token", self.unk_token)) if v}
        config = {
            # PreTrainedTokenizerFast takes tokenizer.json as it is; "GPT2Tokenizer" would make
            # transformers 5 rebuild the pre-tokenizer from vocab and merges and lose the digit split.
            "tokenizer_class": "PreTrainedTokenizerFast",
            **special,
            "add_bos_token": False,
            "add_eos_token": False,
            "add_prefix_space": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": 8192,
            "chat_template": self.chat_template,
        }
        (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=True) + "\n")
        (path / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
        (path / "chat_template.jinja").write_text(self.chat_template)
        return path

    # ---- ids ------------------------------------------------------------------------------------

    def token_id(self, token: str) -> int:
        index = self.backend.token_to_id(token)
        if index is None:
            raise ValueError(f"token {token!r} is not in the vocabulary of {self.vocab_size}")
        return index

    @property
    def bos_token_id(self) -> int:
        return self.token_id(self.bos_token)

    @property
    def eos_token_id(self) -> int:
        return self.token_id(self.eos_token)

    @property
    def pad_token_id(self) -> int | None:
        return None if self.pad_token is None else self.token_id(self.pad_token)

    @property
    def stop_token_ids(self) -> list[int]:
        """Ids that end a generation: `<|im_end|>` (the EOS), `<|endoftext|>`."""
        ids = {self.eos_token_id, *(self.backend.token_to_id(t) for t in STOP_TOKENS)}
        return sorted(i for i in ids if i is not None)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Ids of `text`; special tokens written in it (`<|im_end|>`) become their single ids.
        Lone surrogates (legal in JSON's \\ud800 escapes, not in UTF-8) are encoded as U+FFFD."""
        try:
            return self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        except TypeError:  # tokenizers rejects strings that do not encode to UTF-8
            text = _SURROGATES.sub("\ufffd", text)
            return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def _check_ids(self, ids: Iterable[int]) -> list[int]:
        ids = [int(i) for i in ids]
        bad = next((i for i in ids if not 0 <= i < self.vocab_size), None)
        if bad is not None:
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {self.vocab_size})")
        return ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """The text of `ids`; bytes that are not valid UTF-8 come out as U+FFFD."""
        return self.backend.decode(self._check_ids(ids), skip_special_tokens=skip_special_tokens)

    @property
    def id_to_bytes(self) -> list[bytes]:
        """The raw bytes of each token id (byte-level tokens can be partial UTF-8)."""
        if self._id_to_bytes is None:
            table = _byte_decoder()
            added = {i: t.content for i, t in self.backend.get_added_tokens_decoder().items()}
            out = []
            for index in range(self.vocab_size):
                token = added.get(index) or self.backend.id_to_token(index)
                if index in added or any(c not in table for c in token):
                    out.append(token.encode("utf-8"))
                else:
                    out.append(bytes(table[c] for c in token))
            self._id_to_bytes = out
        return self._id_to_bytes

    def token_strings(self) -> list[str]:
        """The text of each id decoded alone (partial UTF-8 shows as U+FFFD; specials literally)."""
        return [b.decode("utf-8", errors="replace") for b in self.id_to_bytes]

    def incremental_decoder(self, skip_special_tokens: bool = False) -> IncrementalDecoder:
        return IncrementalDecoder(self, skip_special_tokens=skip_special_tokens)

    # ---- chat -----------------------------------------------------------------------------------

    def render_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> str:
        """The prompt text, exactly as `AutoTokenizer.apply_chat_template(..., tokenize=False)`."""
        if not messages:
            raise ValueError("cannot render an empty conversation: give at least one message")
        special = {
            name: value for name in ("bos_token", "eos_token", "unk_token", "pad_token")
            if (value := getattr(self, name)) is not None
        }
        return compile_chat_template(self.chat_template).render(
            # As apply_chat_template: a message's None-valued keys (OpenAI's content=None) are dropped.
            messages=[{k: v for k, v in _plain(m).items() if v is not None} for m in messages],
            tools=None if tools is None else _plain(list(tools)),
            documents=None, add_generation_prompt=add_generation_prompt, **{**special, **kwargs},
        )

    def render_continuation(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        closed_with: str | None = None,
    ) -> str:
        """The text the template adds after an assistant turn's content for `messages` (tool
        results, user messages), the generation prompt included. `closed_with`: the special
        token the completion ended with; the closing goes on from where it holds that token."""
        key = json.dumps(_plain(list(tools)) if tools is not None else None)
        before, closing = self._probe(key)
        probe = [*_PROBE_TURNS, *messages]
        after = self.render_chat(probe, tools, add_generation_prompt=True)
        if not after.startswith(before):
            raise TemplateRewritesHistory(
                "the chat template renders earlier turns differently once new messages follow")
        if closed_with and closed_with in closing:
            closing = closing[closing.index(closed_with) + len(closed_with):]
        return closing + after[len(before):]

    def encode_continuation(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        last_token: int | None = None,
    ) -> list[int]:
        """The ids that extend a conversation whose last sampled token is `last_token` with
        `messages` and the generation prompt (module docstring)."""
        closed_with = None
        if last_token is not None and last_token in self.special_token_ids:
            closed_with = self.decode([last_token])
        return self.encode(self.render_continuation(messages, tools, closed_with=closed_with))

    @functools.lru_cache(maxsize=16)  # noqa: B019 (a tokenizer lives as long as its engine)
    def _probe(self, tools_key: str) -> tuple[str, str]:
        """The probe conversation rendered (without a generation prompt), and what follows the
        assistant turn's content in it: the turn's closing."""
        tools = json.loads(tools_key)
        before = self.render_chat(_PROBE_TURNS, tools, add_generation_prompt=False)
        return before, before[before.rindex(_PROBE) + len(_PROBE):]

    @functools.cached_property
    def reply_end_id(self) -> int:
        """The token a reply ends with: the first stop token the chat template closes an
        assistant turn with (composer-mini: `<|endoftext|>`), else the EOS. Demonstrations end
        replies with it and the tool-call constraint ends free text with it, so a conversation
        rendered from text is the stream the model wrote."""
        try:
            closing = self._probe(json.dumps(None))[1]
        except (jinja2.TemplateError, ValueError):  # a template that refuses the probe's system turn
            return self.eos_token_id
        stops = {self.decode([i]) for i in self.stop_token_ids}
        found = [(closing.index(t), t) for t in stops if t in closing]
        return self.token_id(min(found)[1]) if found else self.eos_token_id

    def user_turn_opening(self) -> list[int]:
        """The ids that open a user message after a system message, the system turn's closing
        and the whitespace at the ends left out (ChatML: `<|im_start|>user`): in a rendered
        conversation, where the instructions end and the conversation begins."""
        system, user = _PROBE + "system", _PROBE + "user"
        text = self.render_chat([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                add_generation_prompt=False)
        between = text[text.index(system) + len(system):text.index(user)]
        try:
            alone = self.render_chat([{"role": "system", "content": system}], add_generation_prompt=False)
            closing = alone[alone.index(system) + len(system):]  # the system turn's
        except jinja2.TemplateError:  # a template that wants a user message (Qwen3's): the user turn's
            closing = text[text.index(user) + len(user):]
        opening = between.removeprefix(closing).strip()
        if not opening:
            raise ValueError("the chat template puts nothing between a system and a user message")
        return self.encode(opening)

    def encode_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> list[int]:
        return self.encode(self.render_chat(messages, tools, add_generation_prompt, **kwargs))

    def encode_prompt(self, messages: Iterable[Mapping[str, Any]], tools: Iterable[Mapping[str, Any]] = ()) -> list[int]:
        """The generation prompt a policy is asked: the messages after the tool schemas (none
        rendered when `tools` is empty)."""
        return self.encode_chat(list(messages), tools=list(tools) or None)


_PROBE_TURNS = ({"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                {"role": "assistant", "content": _PROBE})


class IncrementalDecoder:
    """Streaming detokenisation: `feed` returns only newly completed text, holding back the bytes of
    a UTF-8 sequence until it is complete. Everything fed, then `flush()`, concatenates to exactly
    `tokenizer.decode(ids)` (invalid bytes become U+FFFD in both, by the same maximal-subpart rule).
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False) -> None:
        self._bytes = tokenizer.id_to_bytes
        self._skip = frozenset(tokenizer.special_token_ids) if skip_special_tokens else frozenset()
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token_id: int) -> str:
        if not 0 <= token_id < len(self._bytes):
            raise ValueError(f"token id {token_id} is outside the vocabulary [0, {len(self._bytes)})")
        if token_id in self._skip:
            return ""
        return self._utf8.decode(self._bytes[token_id])

    def flush(self) -> str:
        """Ends the stream: a trailing incomplete sequence comes out as U+FFFD."""
        return self._utf8.decode(b"", final=True)

    @property
    def pending(self) -> bool:
        """Whether bytes of an incomplete character are held back."""
        return bool(self._utf8.getstate()[0])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m model.tokenizer CHECKPOINT_DIR TEXT", file=sys.stderr)
        return 2
    tok = Tokenizer.from_dir(args[0])
    ids = tok.encode(args[1])
    strings = tok.token_strings()
    print(ids)
    print([strings[i] for i in ids])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
