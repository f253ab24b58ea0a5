"""The engine's scheduler used alone, without HTTP: jobs in, events out, failures kept to their own job."""

from __future__ import annotations

import queue

import pytest
import torch

from alilama_core import build_model
from alilama_core.engine.generation import SamplingSettings, generate
from alilama_core.engine.request import Request
from alilama_core.engine.requests import RequestError
from alilama_core.engine.scheduler import Job, Limits, Scheduler
from alilama_testing import tiny_config


@pytest.fixture
def model():
    torch.manual_seed(0)
    return build_model(tiny_config(positional="alibi", attention="eager")).eval()


def _collect(events: queue.Queue) -> tuple[list[int], str]:
    tokens = []
    while True:
        event = events.get(timeout=60)
        if event.token is not None:
            tokens.append(event.token)
        if event.finish_reason is not None:
            return tokens, event.finish_reason


def test_the_scheduler_serves_jobs_without_a_server_and_isolates_a_failure(model):
    scheduler = Scheduler(model, eot_id=None, limits=Limits(max_batch=2, max_tokens=8, max_prompt_tokens=16))
    scheduler.start()
    try:
        greedy = SamplingSettings(max_new_tokens=6, temperature=0)
        prompts = [[1, 2, 3], [5, 6, 7, 8, 9], [11]]
        queues = [queue.Queue() for _ in prompts]
        bad = queue.Queue()
        jobs = [Job(Request(p, greedy), q.put) for p, q in zip(prompts, queues)]
        jobs.insert(1, Job(Request([10_000], greedy), bad.put))  # an id outside the vocabulary: this job fails alone
        scheduler.submit(jobs)
        for prompt, events in zip(prompts, queues):
            tokens, reason = _collect(events)
            assert reason == "length"
            assert tokens == generate(model, [prompt], greedy, None)[0]
        assert _collect(bad)[1] == "error"
    finally:
        scheduler.stop()
        scheduler.join(timeout=10)


def test_the_queue_is_bounded(model):
    scheduler = Scheduler(model, eot_id=None, limits=Limits(max_batch=1, max_queue=2))  # not started: nothing leaves
    job = Job(Request([1], SamplingSettings(max_new_tokens=1)), lambda event: None)
    with pytest.raises(RequestError) as too_many:
        scheduler.submit([job] * 3)
    assert too_many.value.status == 400 and too_many.value.param == "n"
    scheduler.submit([job] * 2)
    with pytest.raises(RequestError) as full:
        scheduler.submit([job])
    assert (full.value.status, full.value.kind) == (429, "server_busy")


def test_jobs_waiting_together_are_admitted_in_one_prefill_and_a_score_only_job_takes_no_row(model):
    """One tick admits every waiting job the batch has rows for: their prompts in one forward pass; a job that
    only scores its prompt (``max_new_tokens=0``) is answered without a row; the rest wait for a free row."""
    scheduler = Scheduler(model, eot_id=None, limits=Limits(max_batch=3, max_tokens=8, max_prompt_tokens=16))
    prefills: list[tuple[int, ...]] = []
    model.register_forward_pre_hook(
        lambda _, args: prefills.append(tuple(args[0].shape)) if args[0].size(1) > 1 else None
    )
    greedy = SamplingSettings(max_new_tokens=4, temperature=0)
    prompts = [[1, 2, 3], [5, 6, 7, 8, 9], [11, 12], [4, 4, 4, 4]]
    events: list[list] = [[] for _ in prompts]
    scored: list = []
    jobs = [Job(Request(p, greedy), box.append) for p, box in zip(prompts, events)]
    jobs.insert(1, Job(Request([7, 8, 9], SamplingSettings(max_new_tokens=0), logprobs=1, echo=True), scored.append))
    scheduler.submit(jobs)
    scheduler._tick()
    assert prefills == [(1, 3), (3, 5)]  # the scored prompt alone, then three prompts together
    assert len(scheduler.batch) == 3 and scheduler.waiting and scheduler.waiting[0].request.prompt == prompts[3]
    assert [s.token for s in scored[0].prompt] == [7, 8, 9]
    while scheduler.jobs or scheduler.waiting:
        scheduler._tick()
    for prompt, got in zip(prompts, events):
        assert [e.token for e in got] == generate(model, [prompt], greedy, None)[0]
