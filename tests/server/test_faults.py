"""Faults composer-lsp survives, small versions of bench/faults.py (the scenarios are in
tests/server/fault_scenarios.py): kill -9 of the server mid-turn, the model endpoint dying
mid-stream, a flood of malformed tool calls, a full disk, and a person stopping a turn mid-step
(tests/server/stop_scenario.py). Each checks that nothing acknowledged
is lost and that the turn that met the fault ended with a clear error.

    .venv/bin/python -m pytest -q tests/server/test_faults.py
"""

from __future__ import annotations

import json

import pytest
from fault_scenarios import (
    disk_full,
    endpoint_dies_mid_stream,
    flood_of_malformed_calls,
    kill_server_mid_sessions,
    run_disk_full,
)
from scripted_model import ScriptedModel
from stop_scenario import stop_mid_step

from agent.cli import main as composer_agent
from agent.session_log import read_session

pytestmark = pytest.mark.slow


async def test_kill_9_mid_turn_loses_no_acknowledged_record_and_every_session_loads_again(tmp_path):
    report = await kill_server_mid_sessions(tmp_path, sessions=3)
    assert report.problems == [], report.checked
    assert "each session goes on in the new server" in report.checked


@pytest.mark.parametrize("how", ["kill", "hangup", "abort"])
async def test_the_endpoint_dying_mid_stream_fails_the_turn_clearly_and_the_session_goes_on(how, tmp_path):
    report = await endpoint_dies_mid_stream(tmp_path, how, deaths=1)
    assert report.problems == [], report.facts
    assert report.facts["error"].startswith("the turn failed: the stream from http://127.0.0.1:")


@pytest.mark.parametrize("how", ["hangup", "abort"])
def test_composer_agent_run_reports_the_endpoint_dying_mid_answer_as_a_failed_turn(how, tmp_path, monkeypatch, capsys):
    """The headless client: an answer cut off is an error (exit 1, stopReason "error", the
    message on stderr, an error record in the log), never a short answer that exits 0."""
    monkeypatch.setenv("COMPOSER_INDEX", "off")
    (tmp_path / "repo").mkdir()
    with ScriptedModel([[{"text": "I will start", "fail": how}]]) as model:
        code = composer_agent(["run", "--workspace", str(tmp_path / "repo"), "--endpoint", model.url, "--json",
                               "--model", "scripted", "--log-dir", str(tmp_path / "logs"), "fix it"])
    out, err = capsys.readouterr()
    summary = json.loads(out.splitlines()[-1])
    assert code == 1 and summary["stopReason"] == "error", summary
    assert summary["error"].startswith("the turn failed: APIConnectionError: the stream from http://127.0.0.1:")
    assert "the turn failed" in err and "Traceback" not in err
    (error,) = [r for r in read_session(summary["log"]) if r["type"] == "error"]
    assert error["kind"] == "APIConnectionError" and error["fatal"] is True


async def test_a_flood_of_malformed_tool_calls_is_bounded_and_told(tmp_path):
    report = await flood_of_malformed_calls(tmp_path, calls=20)
    assert report.problems == [], report.facts
    assert len(report.checked) >= 8


def test_a_full_disk_fails_the_turn_and_leaves_nothing_half_written():
    """On an 8 MiB tmpfs that bubblewrap (installed by make setup) makes: without it this fails."""
    report = run_disk_full(8 * 2**20)
    assert report.problems == [], report.facts
    assert "No space left on device" in report.facts["checkpoint_error"]
    assert "No space left on device" in report.facts["log_error"]


async def test_the_disk_full_scenario_refuses_to_fill_a_real_disk(tmp_path):
    with pytest.raises(ValueError, match="small filesystem of its own"):
        await disk_full(tmp_path)


async def test_a_stop_mid_step_ends_every_call_and_kills_the_running_command(tmp_path):
    report = await stop_mid_step(tmp_path, commands=2)
    assert report.problems == [], report.checked
    assert report.recover_s < 10
