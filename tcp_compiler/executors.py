"""Where a sweep's points run: local worker processes (the default) or Ray tasks on a cluster.

An executor takes the points, a worker count and `run` (point -> row) and yields (index, row) as
points finish, in any order; a point whose run raised (a bug, a worker that died) yields its
exception instead, so the sweep records it in the point's row and goes on. Workers are long-lived
processes either way, so whatever a worker caches (compiled programs, loaded models) serves the
points it runs after.

Local workers are forked from a fork server, never from the caller: a caller with threads running
(Ray's, torch's) cannot be forked safely, since a lock another thread held stays held in the child.
The server imports the sweep's modules once, so a worker starts with them loaded.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from typing import Any

Outcome = dict | Exception
Executor = Callable[[Sequence, int, Callable[[Any], dict]], Iterator[tuple[int, Outcome]]]
EXECUTORS = ("local", "ray")
WORKERS = multiprocessing.get_context("forkserver")
WORKERS.set_forkserver_preload(["tcp_compiler.sweep"])


def local_executor(points: Sequence, jobs: int, run: Callable[[Any], dict]) -> Iterator[tuple[int, Outcome]]:
    """In this process (jobs 1) or a pool of `jobs` worker processes; interrupted, it cancels the
    points not started instead of waiting for them."""
    if jobs <= 1:
        for i, p in enumerate(points):
            yield i, _outcome(run, p)
        return
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=WORKERS)
    try:
        futures = {pool.submit(run, p): i for i, p in enumerate(points)}
        for future in as_completed(futures):
            error = future.exception()
            yield futures[future], future.result() if error is None else error
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


@contextmanager
def ray_session(address: str | None, jobs: int) -> Iterator[None]:
    """Ray for what runs inside: the cluster at `address`, or a local Ray with `jobs` CPUs, shut
    down on leaving; a Ray already initialised in this process is used as it is, and left running.
    A search holds one session across its generations, so its workers keep their caches."""
    import ray  # the `cluster` extra: pip install -e '.[cluster]'

    started = not ray.is_initialized()
    if started:
        ray.init(address=address, num_cpus=None if address else jobs, include_dashboard=False,
                 log_to_driver=False)  # fmt: skip
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def ray_executor(address: str | None = None) -> Executor:
    """Ray tasks in a ray_session (the caller's, or one for these points)."""

    def run_on_ray(points: Sequence, jobs: int, run: Callable[[Any], dict]) -> Iterator[tuple[int, Outcome]]:
        import ray

        with ray_session(address, jobs):
            task, shared_run = ray.remote(_outcome), ray.put(run)
            pending = {task.remote(shared_run, p): i for i, p in enumerate(points)}
            while pending:
                (ready,), _ = ray.wait(list(pending), num_returns=1)
                index = pending.pop(ready)
                try:
                    yield index, ray.get(ready)
                except ray.exceptions.RayError as e:  # the worker died, or the task could not run
                    yield index, e

    return run_on_ray


def _outcome(run: Callable[[Any], dict], point: Any) -> Outcome:
    try:
        return run(point)
    except Exception as e:  # recorded in the point's row: one point's bug does not end the sweep
        return e
