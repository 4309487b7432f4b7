"""on_passing_thread: set-up work on a thread that ends with it (model/omp_pools.py)."""

from __future__ import annotations

import threading

import pytest

from iterserve.model.omp_pools import on_passing_thread


def test_the_work_runs_on_another_thread_that_is_gone_after() -> None:
    seen: list[threading.Thread] = []

    def work() -> int:
        seen.append(threading.current_thread())
        return 42

    assert on_passing_thread(work) == 42
    assert seen and seen[0] is not threading.current_thread()
    assert not seen[0].is_alive()


def test_a_failure_is_raised_on_the_caller_as_it_was_raised() -> None:
    error = ValueError("damaged checkpoint: no config.json")

    def work() -> None:
        raise error

    with pytest.raises(ValueError) as caught:
        on_passing_thread(work)
    assert caught.value is error


def test_a_none_result_is_returned_as_none() -> None:
    assert on_passing_thread(lambda: None) is None
