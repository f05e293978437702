"""Which prompts are slash commands (server/slash_commands.py); `/undo` end to end is in
tests/server/test_acp.py (ACP's clients have no other undo) and answers over every transport."""

from __future__ import annotations

from server.slash_commands import COMMANDS, parse_command


def test_only_a_known_command_at_the_start_of_the_prompt_is_one():
    assert parse_command("/undo") == ("undo", "")
    assert parse_command("  /undo forget \n") == ("undo", "forget")
    assert parse_command("/undo\tforget") == parse_command("/undo\nforget") == ("undo", "forget")
    assert parse_command("/undo the edit of a.py") == ("undo", "the edit of a.py")  # told its usage, not sent on
    assert parse_command("/usr/bin/env is missing, fix the shebang") is None
    assert parse_command("please /undo") is None
    assert parse_command("/") is None and parse_command("") is None
    assert parse_command("/undone") is None


def test_every_advertised_command_runs():
    assert all(parse_command(f"/{c['name']}") is not None for c in COMMANDS)
