"""The bounded-staleness buffer (training/buffer.py): admission, ordering, stragglers, journal."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from training.buffer import Group, Sample, StalenessBuffer, read_journal

pytestmark = pytest.mark.usefixtures("one_thread")


def sample(reward=1.0, n=3, routing=False):
    return Sample(
        tokens=list(range(n)), mask=[False] + [True] * (n - 1),
        behaviour_logprobs=[math.nan] + [-0.5] * (n - 1), reward=reward,
        routing=np.arange(n * 2 * 2, dtype=np.uint8).reshape(n, 2, 2) if routing else None,
    )


def group(job, version):
    return Group(job, version, [sample(), sample(0.0)])


def drain(buf):
    jobs = []
    while (job := buf.next_job()) is not None:
        jobs.append(job)
    return jobs


def test_synchronous_buffer_starts_one_update_of_jobs_per_version():
    buf = StalenessBuffer(groups_per_step=2, max_offpolicy_steps=0)
    assert drain(buf) == [0, 1]
    for job in (1, 0):
        buf.admit(group(job, 0))
    taken = asyncio.run(buf.take())
    assert [g.job for g in taken] == [0, 1]  # job order, whatever order they finished in
    assert drain(buf) == []  # nothing more until the update is done
    buf.advance(taken)
    assert buf.version == 1 and drain(buf) == [2, 3]


def test_max_offpolicy_steps_lets_rollouts_run_ahead_and_take_serves_oldest_first():
    buf = StalenessBuffer(groups_per_step=2, max_offpolicy_steps=1)
    assert drain(buf) == [0, 1, 2, 3]
    buf.admit(group(3, 0))
    buf.admit(group(2, 0))
    taken = asyncio.run(buf.take())
    assert [g.job for g in taken] == [2, 3]
    buf.advance(taken)
    buf.admit(group(0, 0))  # finished late but within the bound (version 1 - 1)
    buf.admit(group(4, 1))
    assert [g.job for g in asyncio.run(buf.take())] == [0, 4]


def test_a_straggler_beyond_the_bound_is_dropped_and_counted(tmp_path):
    buf = StalenessBuffer(groups_per_step=1, max_offpolicy_steps=1, journal=tmp_path / "j.jsonl")
    assert drain(buf) == [0, 1]
    buf.admit(group(1, 0))
    buf.advance(asyncio.run(buf.take()))
    buf.admit(group(2, 1))
    buf.advance(asyncio.run(buf.take()))
    buf.admit(group(0, 0))  # version 0 < 2 - 1
    assert buf.dropped_stale == 1 and not buf.pending
    assert [g.dropped for g in read_journal(tmp_path / "j.jsonl")] == ["", "", "stale"]


def test_take_waits_for_enough_groups():
    async def scenario():
        buf = StalenessBuffer(groups_per_step=2, max_offpolicy_steps=0)
        drain(buf)
        waiter = asyncio.create_task(buf.take())
        buf.admit(group(0, 0))
        await asyncio.sleep(0)
        assert not waiter.done()
        buf.admit(group(1, 0))
        return [g.job for g in await waiter]

    assert asyncio.run(scenario()) == [0, 1]


def test_resume_from_the_journal_loses_and_duplicates_nothing(tmp_path):
    path = tmp_path / "groups.jsonl"
    buf = StalenessBuffer(groups_per_step=2, max_offpolicy_steps=1, journal=path)
    assert drain(buf) == [0, 1, 2, 3]
    for job in (0, 1, 3):
        buf.admit(group(job, 0))
    first = asyncio.run(buf.take())
    buf.advance(first)  # the checkpoint is written here: version 1, consumed {0, 1}
    checkpoint = buf.state()
    assert drain(buf) == [4, 5]
    buf.admit(group(4, 1))
    buf.advance(asyncio.run(buf.take()))  # consumes 3 and 4, then the process is killed
    with open(path, "ab") as f:
        f.write(b'{"job": 5, "vers')  # torn mid-write

    again = StalenessBuffer(2, 1, journal=path, **checkpoint)
    # 3 and 4 were consumed only by the lost update: pending again; 2 and 5 were in flight.
    assert sorted(g.job for g in again.pending) == [3, 4]
    assert drain(again) == [2, 5]
    again.admit(group(2, 1))
    again.admit(group(5, 1))
    used = [g.job for g in asyncio.run(again.take())] + [g.job for g in asyncio.run(again.take())]
    assert sorted(used + checkpoint["consumed"]) == [0, 1, 2, 3, 4, 5]
    assert len(read_journal(path)) == 6  # the torn line was cut, the appends are whole
    with pytest.raises(ValueError, match="already finished"):
        again.admit(group(3, 1))


def test_samples_round_trip_through_json_with_nan_and_routing():
    s = sample(reward=math.nan, routing=True)
    back = Sample.from_json(s.to_json())
    assert math.isnan(back.reward) and math.isnan(back.behaviour_logprobs[0])
    assert back.behaviour_logprobs[1:] == [-0.5, -0.5] and back.tokens == s.tokens
    assert np.array_equal(back.routing, s.routing)
    with pytest.raises(ValueError, match="3 tokens, 2 mask"):
        Sample(tokens=[1, 2, 3], mask=[True, True], behaviour_logprobs=[0, 0, 0], reward=1.0)
