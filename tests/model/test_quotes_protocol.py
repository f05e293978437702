"""The `quotes` vendor field (model/quotes_protocol.py): what the client encodes the server decodes
to the engine's quotes, each file's text sent once; malformed fields are named."""

from __future__ import annotations

import pytest

from model.quotes_protocol import decode, encode

A, B = "x = 1\n", "y = 2\n"


def test_each_text_goes_once_with_all_its_names_and_comes_back_for_every_argument():
    files = {"a.py": A, "./a.py": A, "/w/a.py": A, "b.py": B}
    field = encode({"edit_file": {"old_string": files}, "patch": {"old": files, "anchor": files}})
    assert field == {"arguments": {"edit_file": ["old_string"], "patch": ["old", "anchor"]},
                     "files": [{"paths": ["a.py", "./a.py", "/w/a.py"], "text": A}, {"paths": ["b.py"], "text": B}]}
    assert decode(field) == {"edit_file": {"old_string": files}, "patch": {"old": files, "anchor": files}}


def test_nothing_to_quote_sends_nothing_and_differing_sources_are_refused():
    assert encode({}) is None and encode({"edit_file": {"old_string": {}}}) is None
    assert decode({"arguments": {"edit_file": ["old_string"]}, "files": []}) == {}
    with pytest.raises(ValueError, match="different files"):
        encode({"edit_file": {"old_string": {"a.py": A}}, "patch": {"old": {"b.py": B}}})


@pytest.mark.parametrize(("field", "named"), [
    ([A], "an object"), ({"arguments": {}, "files": [], "extra": 1}, "an object"),
    ({"arguments": {"edit_file": "old_string"}}, "'arguments'"), ({"arguments": {"edit_file": [1]}}, "'arguments'"),
    ({"files": {"a.py": A}}, "'files'"), ({"files": [{"paths": "a.py", "text": A}]}, r"files\[0\]"),
    ({"files": [{"paths": ["a.py"], "text": A}, {"paths": ["b.py"]}]}, r"files\[1\]"),
])
def test_malformed_fields_are_named(field, named):
    with pytest.raises(ValueError, match=named):
        decode(field)
