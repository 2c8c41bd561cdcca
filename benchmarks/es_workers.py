"""The ES pipeline on this machine (``ding -m es``, docs/es.md). Parts, each printing a table:

- ``solve``: ``es_pipeline`` on ``cartpole_es_config`` with 2 local worker processes, seeds 0-2: solved or not, wall
  time, updates, env steps and episodes used (two per antithetic pair received, plus the evaluations' are not
  counted);
- ``throughput``: the ES server + 1, 2, 4 worker processes, updates on a background thread, evaluation off:
  partials per second over ``--seconds`` once every worker has its first model;
- ``slow-worker``: 2 worker processes plus one simulated worker that waits ``--ack-delay`` s before acknowledging
  each chunk (``chunk_bytes`` small, so a download takes many chunks): model bytes sent per update and the
  download resets;
- ``fake200``: 200 simulated workers in this process (asyncio: connect, init, download with acks, one return every
  ``--return-interval`` s): partials per second, whether the updates kept up (dropped partials), this process's RSS
  at three points, and what is left once they disconnect.

    python benchmarks/es_workers.py --part solve|throughput|slow-worker|fake200|all [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import resource
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ding.config.merge import deep_merge_dicts  # noqa: E402
from ding.entry.es_entry import build_es_parts, run_es_loop  # noqa: E402
from ding.policy.es import ESPolicy  # noqa: E402
from ding.worker.es.config import ESServerSettings  # noqa: E402
from ding.worker.es.partial_buffer import UpdateThread  # noqa: E402
from ding.worker.es.processes import ESWorkerProcesses  # noqa: E402
from ding.worker.es.protocol import HELLO_BYTES, LENGTH, FrameCodec, read_hello, session_key  # noqa: E402
from ding.worker.es.server import ESServer  # noqa: E402
from dizoo.classic_control.cartpole.config import cartpole_es_config  # noqa: E402

TOKEN = 'benchmark-token'
SLOW_CHUNK_BYTES = 128  # the CartPole model (131 floats) then takes 5 chunks


def cartpole_config() -> tuple[Any, Any]:
    return copy.deepcopy(cartpole_es_config.main_config), copy.deepcopy(cartpole_es_config.create_config)


def make_policy() -> ESPolicy:
    main, _ = cartpole_config()
    return ESPolicy(deep_merge_dicts(ESPolicy.default_config(), main.policy), enable_field=['learn', 'eval'])


def rss_mib() -> float:
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) / 1024
    return float('nan')


class Served:
    """A server with ``policy`` and its update thread (policy.update, then publish)."""

    def __init__(self, policy: Any, **settings: Any) -> None:
        self.policy = policy
        self.server = ESServer(policy, ESServerSettings(**settings), TOKEN, policy.population_size)
        self.thread = UpdateThread(self.server.take_batch, self._update)

    def _update(self, partials: list[Any]) -> None:
        self.policy.update(partials)
        flat, version = self.policy.flat_parameters_with_version()
        self.server.publish_model(version, flat)

    def __enter__(self) -> Served:
        self.server.start()
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.thread.stop()
        self.server.stop()


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f'timed out waiting for {what}')
        time.sleep(0.05)


def part_solve(seeds: list[int]) -> None:
    print('| seed | solved | wall s | updates | env steps | episodes |\n|---|---|---|---|---|---|')
    for seed in seeds:
        main, create = cartpole_config()
        main.policy.setdefault('es_server', {})['worker_num'] = 2
        with tempfile.TemporaryDirectory() as tmp:
            cwd = os.getcwd()
            os.chdir(tmp)
            try:
                start = time.perf_counter()
                parts = build_es_parts(main, create, seed, None, None, None)
                try:
                    run_es_loop(parts, None, int(2e6))
                except Exception as exc:
                    print(f'seed {seed}: {type(exc).__name__}: {exc}')
                wall = time.perf_counter() - start
            finally:
                os.chdir(cwd)
        stats = parts.server.stats
        episodes = 2 * (stats['partials_received'] + stats['stale_partials'])
        solved = parts.progress.last_eval_return is not None and parts.progress.last_eval_return >= main.env.stop_value
        print(f'| {seed} | {solved} | {wall:.1f} | {parts.learner.train_iter} | {stats["env_steps"]} | {episodes} |')


def part_throughput(seconds: float, counts: list[int]) -> None:
    print('| workers | partials/s | updates/s | dropped | env steps/s |\n|---|---|---|---|---|')
    for n in counts:
        with Served(make_policy()) as served:
            server = served.server
            host, port = server.address  # type: ignore[misc]
            workers = ESWorkerProcesses(TOKEN, n)
            workers.start_all(host, port)
            try:
                wait_for(lambda s=server, k=n: s.stats['downloads_completed'] >= k, 120, f'{n} workers with a model')
                before = server.stats.snapshot()
                time.sleep(seconds)
                after = server.stats.snapshot()
            finally:
                workers.stop()

            def rate(name: str, a: dict = after, b: dict = before) -> float:
                return (a[name] - b[name]) / seconds

            print(f'| {n} | {rate("partials_received"):.1f} | {rate("model_updates"):.2f} | '
                  f'{after["dropped_partials"] - before["dropped_partials"]:.0f} | {rate("env_steps"):.0f} |')  # fmt: skip


class SimulatedWorker:
    """One worker over asyncio: connect, init, download (acknowledging each chunk after ``ack_delay`` s), and
    a made-up return every ``return_interval`` s (0: none)."""

    def __init__(self, address: tuple[str, int], ack_delay: float, return_interval: float, seed: int) -> None:
        self.address, self.ack_delay, self.return_interval = address, ack_delay, return_interval
        self.rng = np.random.default_rng(seed)
        self.version = 0
        self.max_noise_id = 1000

    async def run(self, stop: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection(*self.address)
        codec = FrameCodec(session_key(TOKEN, read_hello(await reader.readexactly(HELLO_BYTES))), 'worker')
        writer.write(codec.encode('init'))
        tasks = [asyncio.ensure_future(self._receive(reader, writer, codec))]
        if self.return_interval > 0:
            tasks.append(asyncio.ensure_future(self._send_returns(writer, codec, stop)))
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        writer.close()

    async def _receive(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, codec: FrameCodec) -> None:
        while True:
            (length,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
            message = codec.decode(await reader.readexactly(length))
            if message.type != 'chunk':
                continue
            end = message.fields['offset'] + len(message.body)
            if end < message.fields['total']:
                await asyncio.sleep(self.ack_delay)
                writer.write(codec.encode('ack', {'version': message.fields['version'], 'offset': end}))
            else:
                self.version = message.fields['version']

    async def _send_returns(self, writer: asyncio.StreamWriter, codec: FrameCodec, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(self.return_interval * (0.5 + self.rng.random()))
            fields = {'noise_id': int(self.rng.integers(self.max_noise_id)), 'return_pos': float(self.rng.random()),
                      'return_neg': float(self.rng.random()), 'version': self.version, 'env_steps': 2}  # fmt: skip
            writer.write(codec.encode('return', fields))


def run_simulated(workers: list[SimulatedWorker], seconds: float, probe: Any = None) -> None:
    """Run ``workers`` for ``seconds`` on an event loop of their own thread; ``probe()`` is called every second."""

    async def main() -> None:
        stop = asyncio.Event()
        tasks = [asyncio.ensure_future(w.run(stop)) for w in workers]
        for _ in range(int(seconds)):
            await asyncio.sleep(1.0)
            if probe is not None:
                probe()
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())


def part_slow_worker(seconds: float, ack_delay: float) -> None:
    print('| chunk bytes | ack delay s | updates | bytes sent per update | resets | skipped updates |')
    print('|---|---|---|---|---|---|')
    with Served(make_policy(), chunk_bytes=SLOW_CHUNK_BYTES, very_old_lag=2) as served:
        server = served.server
        host, port = server.address  # type: ignore[misc]
        workers = ESWorkerProcesses(TOKEN, 2)
        workers.start_all(host, port)
        try:
            wait_for(lambda: server.stats['downloads_completed'] >= 2, 120, 'the workers with a model')
            slow = SimulatedWorker((host, port), ack_delay, 0.0, 0)
            before = server.stats.snapshot()
            run_simulated([slow], seconds)
            after = server.stats.snapshot()
        finally:
            workers.stop()
    updates = max(1.0, after['model_updates'] - before['model_updates'])
    print(f'| {SLOW_CHUNK_BYTES} | {ack_delay} | {updates:.0f} | {(after["bytes_sent"] - before["bytes_sent"]) / updates:.0f} | '
          f'{after["download_resets"]:.0f} | {after["skipped_model_updates"]:.0f} |')  # fmt: skip


def part_fake200(seconds: float, return_interval: float) -> None:
    policy = make_policy()
    rss: list[float] = [rss_mib()]
    with Served(policy) as served:
        server = served.server
        address = server.address
        assert address is not None
        workers = [SimulatedWorker(address, 0.0, return_interval, i) for i in range(200)]
        for w in workers:
            w.max_noise_id = policy.noise_table.max_noise_id(policy.dim)
        samples: list[tuple[float, float]] = []
        threads_before = threading.active_count()
        run_simulated(workers, seconds, lambda: samples.append((rss_mib(), server.stats['connected_workers'])))
        wait_for(lambda: server.stats['connected_workers'] == 0, 30, 'every simulated worker gone')
        stats = server.stats.snapshot()
        left = (len(server.downloads), threading.active_count() - threads_before)
    rss.append(rss_mib())
    mid = samples[len(samples) // 2][0] if samples else float('nan')
    peak = max(s[1] for s in samples) if samples else 0
    print('| workers | partials/s | updates | dropped | RSS MiB start / mid / end of run | downloads, threads left |')
    print('|---|---|---|---|---|---|')
    print(f'| {peak:.0f} | {stats["partials_received"] / seconds:.0f} | {stats["model_updates"]:.0f} | '
          f'{stats["dropped_partials"]:.0f} | {rss[0]:.0f} / {mid:.0f} / {samples[-1][0]:.0f} | {left} |')  # fmt: skip
    print(f'peak RSS (ru_maxrss) {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--part', choices=('solve', 'throughput', 'slow-worker', 'fake200', 'all'), default='all')
    parser.add_argument('--seconds', type=float, default=20.0)
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--workers', type=int, nargs='+', default=[1, 2, 4])
    parser.add_argument('--ack-delay', type=float, default=0.2)
    parser.add_argument('--return-interval', type=float, default=0.5)
    args = parser.parse_args()
    os.environ.setdefault('DING_PROGRESS', '0')
    if args.part in ('solve', 'all'):
        part_solve(args.seeds)
    if args.part in ('throughput', 'all'):
        part_throughput(args.seconds, args.workers)
    if args.part in ('slow-worker', 'all'):
        part_slow_worker(args.seconds, args.ack_delay)
    if args.part in ('fake200', 'all'):
        part_fake200(args.seconds, args.return_interval)


if __name__ == '__main__':
    main()
