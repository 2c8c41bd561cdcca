"""SEED (central inference) on this machine: the transport's round trip and CartPole throughput.

Rows of ``--part transports`` (the round trip per step on loopback: one actor process sends ``--requests``
requests of 8 CartPole-sized observations and waits for 8 actions; the time seen by the actor, p50 / p99, the
first tenth left out as warm-up):

- shm + Unix socket and ZeroMQ (DEALER / ROUTER over TCP on 127.0.0.1), each through the real inference server
  with a 4 -> 2 linear model (no env, no learner);
- ZeroMQ and gRPC bidirectional streaming (generic handler, bytes in and out, no codegen), each against a bare
  responder thread that computes the same actions with numpy: the two libraries compared on equal terms.

Rows of ``--part throughput``:

- SEED IMPALA / SEED DQN: ``seed_pipeline`` on ``cartpole_seed_a2c_config`` / ``cartpole_seed_dqn_config``, 2 actor
  processes x 8 envs, training, evaluation off: env steps/s over ``--seconds`` after a warm-up, mean inference
  batch, request latency p50 / p99 (server side);
- async IMPALA (actor-side inference, 2 actor threads x 8 envs, double buffering off), the same way, for comparison;
- collectors: two processes each running ding's serial collector (the parallel pipeline's collectors run it) over
  8 envs with its own DQN model, at the same time, no learner: the sum of their env steps/s.

    python benchmarks/seed_inference.py [--part all|transports|throughput] [--seconds 20] [--requests 20000]
        [--skip-async] [--skip-collector]
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
ENVS = 8


STEP_HEADER = struct.Struct('<4sI')  # the bare responders' header: a kind and the request number
WEIGHTS = np.random.default_rng(0).standard_normal((4, 2)).astype(np.float32)


def _greedy(obs: bytes) -> bytes:
    return (np.frombuffer(obs, np.float32).reshape(ENVS, 4) @ WEIGHTS).argmax(-1).astype(np.int64).tobytes()


def _client_link(kind: str, where: str, secret: str) -> Any:
    from ding.worker.seed.transport import ActorClient, SlotLayout

    layout = SlotLayout(ENVS, (4,), 2)
    if kind == 'shm':
        return ActorClient(where, secret, 0, layout)
    from ding.worker.seed.remote import RemoteActorClient

    return RemoteActorClient(where, secret, 1, layout)


def _timed(requests: int, step: Any) -> str:
    times = np.empty(requests)
    for i in range(requests):
        start = time.perf_counter()
        step(i)
        times[i] = time.perf_counter() - start
    warm = times[requests // 10 :] * 1e6
    return f'{np.percentile(warm, 50):.1f} {np.percentile(warm, 99):.1f}'


def client_main(kind: str, where: str, requests: int) -> None:
    """The actor side of a round-trip row (run in a child process): prints p50 and p99 in microseconds."""
    obs = np.zeros((ENVS, 4), dtype=np.float32)
    if kind in ('shm', 'zmq'):  # through the inference server
        from ding.worker.seed.transport import RUN_SECRET_ENV

        client = _client_link(kind, where, os.environ[RUN_SECRET_ENV])
        client.join()
        reward, flags = np.zeros(ENVS, dtype=np.float32), np.zeros(ENVS, dtype=bool)
        print(_timed(requests, lambda i: client.request(obs, reward, flags, flags)))
        client.close()
    elif kind == 'zmq-bare':
        import zmq

        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.connect(f'tcp://{where}')

        def zmq_step(i: int) -> None:
            sock.send_multipart([STEP_HEADER.pack(b'STEP', i), obs.tobytes()])
            np.frombuffer(sock.recv_multipart()[1], np.int64)

        print(_timed(requests, zmq_step))
        sock.close(0)
    else:
        import queue

        import grpc

        channel = grpc.insecure_channel(where)
        outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        answers = channel.stream_stream('/ding.Seed/Act')(iter(outbox.get, None))

        def grpc_step(i: int) -> None:
            outbox.put(STEP_HEADER.pack(b'STEP', i) + obs.tobytes())
            np.frombuffer(next(answers), np.int64, ENVS, STEP_HEADER.size)

        print(_timed(requests, grpc_step))
        outbox.put(None)
        channel.close()


def _run_client(kind: str, where: str, requests: int, secret: str = '') -> tuple[float, float]:
    from ding.worker.seed.transport import RUN_SECRET_ENV

    out = subprocess.run(
        [sys.executable, __file__, '--client', kind, '--where', where, '--requests', str(requests)],
        env={**os.environ, RUN_SECRET_ENV: secret, 'PYTHONPATH': ROOT},
        capture_output=True,
        text=True,
        check=True,
    )
    p50, p99 = (float(x) for x in out.stdout.split())
    return p50, p99


def server_round_trips(requests: int) -> dict[str, tuple[float, float]]:
    """p50 / p99 of a shm actor and of a ZeroMQ actor, one after the other, against one inference server."""
    import torch

    from ding.worker.async_actor.queues import StagingQueue, TrajectoryQueue
    from ding.worker.seed.acting import BatchActing, QNetActing
    from ding.worker.seed.assembly import TransitionAssembler
    from ding.worker.seed.server import InferenceServer
    from ding.worker.seed.transport import SlotLayout, new_secret

    class Linear(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = torch.nn.Linear(4, 2)

        def forward(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
            return {'logit': self.head(obs)}

    qnet = QNetActing(Linear())
    staging = StagingQueue(1)
    staging.publish(0, qnet.actor_weights())
    layout = SlotLayout(ENVS, (4,), 2)
    sink_queue: TrajectoryQueue[Any] = TrajectoryQueue(1_000_000)
    workdir, secret = tempfile.mkdtemp(prefix='ding_seed_bench_'), new_secret()
    server = InferenceServer(
        os.path.join(workdir, 's.sock'),
        secret,
        layout,
        1,
        BatchActing(qnet, staging),
        TransitionAssembler(1_000_000, layout, sink_queue),  # chunks never fill: no assembly cost beyond the step
        ENVS,
        0,
        60.0,
        listen='127.0.0.1:0',
        remote_actor_num=1,
    )
    server.start()
    try:
        shm = _run_client('shm', server.socket_path, requests, secret)
        remote = _run_client('zmq', str(server.remote_address), requests, secret)
    finally:
        server.stop()
        sink_queue.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return {'shm': shm, 'zmq': remote}


def _zmq_responder(ready: list[str], stop: threading.Event) -> None:
    import zmq

    sock = zmq.Context.instance().socket(zmq.ROUTER)
    ready.append(f'127.0.0.1:{sock.bind_to_random_port("tcp://127.0.0.1")}')
    while not stop.is_set():
        if sock.poll(100):
            identity, header, obs = sock.recv_multipart()
            sock.send_multipart([identity, header, _greedy(obs)])
    sock.close(0)


def _grpc_responder(ready: list[str], stop: threading.Event) -> None:
    from concurrent import futures

    import grpc

    def act(requests: Any, context: Any) -> Any:
        for message in requests:
            yield message[: STEP_HEADER.size] + _greedy(message[STEP_HEADER.size :])

    handler = grpc.method_handlers_generic_handler('ding.Seed', {'Act': grpc.stream_stream_rpc_method_handler(act)})
    server = grpc.server(futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers((handler,))
    ready.append(f'127.0.0.1:{server.add_insecure_port("127.0.0.1:0")}')
    server.start()
    stop.wait()
    server.stop(0)


def bare_round_trip(kind: str, requests: int) -> tuple[float, float]:
    ready: list[str] = []
    stop = threading.Event()
    responder = threading.Thread(target=_zmq_responder if kind == 'zmq-bare' else _grpc_responder, args=(ready, stop))
    responder.start()
    try:
        while not ready:
            time.sleep(0.01)
        return _run_client(kind, ready[0], requests)
    finally:
        stop.set()
        responder.join()


def transports(requests: int) -> None:
    rows = server_round_trips(requests)
    figures = [
        ('shm + Unix socket, inference server', rows['shm']),
        ('ZeroMQ DEALER/ROUTER (TCP), inference server', rows['zmq']),
        ('ZeroMQ DEALER/ROUTER (TCP), bare numpy responder', bare_round_trip('zmq-bare', requests)),
        ('gRPC bidi stream (TCP), bare numpy responder', bare_round_trip('grpc-bare', requests)),
    ]
    print(f'round trip per step on loopback, 1 actor x {ENVS} CartPole observations, {requests} requests')
    print(f'{"transport":<50} {"p50 us":>9} {"p99 us":>9}')
    print('-' * 70)
    for what, (p50, p99) in figures:
        print(f'{what:<50} {p50:>9.1f} {p99:>9.1f}')


def _sampled_run(parts: Any, run_loop: Any, seconds: float) -> float:
    """Env steps/s of a pipeline run after a warm-up, sampled from a side thread that ends it with SIGTERM."""
    feed, result = parts.feed, {}

    def sample() -> None:
        while feed.envstep == 0:
            time.sleep(0.05)
        time.sleep(min(3.0, seconds / 4))
        start_steps, start = feed.envstep, time.perf_counter()
        time.sleep(seconds)
        result['rate'] = (feed.envstep - start_steps) / (time.perf_counter() - start)
        signal.raise_signal(signal.SIGTERM)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run_loop(parts, None, None)
    except KeyboardInterrupt:
        pass
    sampler.join(timeout=5)
    return result['rate']


def seed_rate(config: str, seconds: float) -> tuple[float, dict[str, float]]:
    from easydict import EasyDict

    from ding.entry.seed_entry import build_seed_parts, run_seed_loop

    module = importlib.import_module(f'dizoo.classic_control.cartpole.config.{config}')
    cfg, create_cfg = EasyDict(copy.deepcopy(module.main_config)), EasyDict(copy.deepcopy(module.create_config))
    cfg.exp_name = f'bench_{config}'
    cfg.policy.eval.evaluator.eval_freq = 0
    cfg.policy.seed.update(actor_num=2, env_per_actor=ENVS)
    parts = build_seed_parts(cfg, create_cfg, 0, None, None, None)
    rate = _sampled_run(parts, run_seed_loop, seconds)
    return rate, parts.server.stats.snapshot()


def async_rate(seconds: float) -> float:
    from easydict import EasyDict

    from ding.entry.async_entry import build_async_parts, run_async_loop

    module = importlib.import_module('dizoo.classic_control.cartpole.config.cartpole_impala_config')
    cfg, create_cfg = EasyDict(copy.deepcopy(module.main_config)), EasyDict(copy.deepcopy(module.create_config))
    cfg.exp_name = 'bench_async_impala'
    cfg.policy.eval.evaluator.eval_freq = 0
    cfg.policy.async_actor.update(actor_num=2, env_per_actor=ENVS, double_buffer=False)
    cfg.policy.learn.batch_size = 2
    parts = build_async_parts(cfg, create_cfg, 0, None, None, None)
    return _sampled_run(parts, run_async_loop, seconds)


def collector_client(steps: int) -> None:
    """One process of actor-side inference as the parallel pipeline's collectors do it: ding's serial collector
    over ENVS CartPole envs with its own DQN model; prints its env steps/s."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from collect_throughput import collector_rate, make_policy

    from dizoo.classic_control.cartpole.config import cartpole_dqn_config

    cfg, policy = make_policy(cartpole_dqn_config.main_config, cartpole_dqn_config.create_config)
    print(f'{collector_rate(cfg, policy, steps):.1f}', flush=True)


def collector_processes_rate(seconds: float) -> float:
    """Two collector processes stepping at once (no learner): the sum of their env steps/s."""
    steps = int(1500 * seconds)  # about `seconds` each on this machine; each reports its own rate
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), '--collector-steps', str(steps)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        return sum(float(p.communicate(timeout=seconds * 20 + 120)[0].split()[-1]) for p in procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--part', choices=('all', 'transports', 'throughput'), default='all')
    parser.add_argument('--seconds', type=float, default=20.0)
    parser.add_argument('--requests', type=int, default=20_000)
    parser.add_argument('--skip-async', action='store_true')
    parser.add_argument('--skip-collector', action='store_true')
    parser.add_argument('--client', help=argparse.SUPPRESS)
    parser.add_argument('--collector-steps', type=int, help=argparse.SUPPRESS)
    parser.add_argument('--where', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client_main(args.client, args.where, args.requests)
        return
    os.environ.setdefault('DING_QUIET', '1')
    os.environ.setdefault('DING_PROGRESS', '0')
    import torch

    torch.set_num_threads(1)
    if args.collector_steps:
        collector_client(args.collector_steps)
        return
    if args.part in ('all', 'transports'):
        transports(args.requests)
    if args.part == 'transports':
        return
    home, workdir = os.getcwd(), tempfile.mkdtemp(prefix='ding_seed_bench_')
    os.chdir(workdir)
    rows: list[tuple[str, float, str, str]] = []
    try:
        for config, what in (('cartpole_seed_a2c_config', 'SEED IMPALA'), ('cartpole_seed_dqn_config', 'SEED DQN')):
            rate, stats = seed_rate(config, args.seconds)
            latency = f'{stats["latency_us_p50"]:.0f} / {stats["latency_us_p99"]:.0f}'
            rows.append((f'{what}, 2 processes x {ENVS} envs', rate, f'{stats["inference_batch_mean"]:.1f}', latency))
        if not args.skip_async:
            rows.append((f'async IMPALA, 2 threads x {ENVS} envs (actor-side)', async_rate(args.seconds), '-', '-'))
        if not args.skip_collector:
            rate = collector_processes_rate(args.seconds)
            rows.append((f'collectors (DQN), 2 processes x {ENVS} envs (actor-side)', rate, '-', '-'))
    finally:
        os.chdir(home)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f'{"CartPole":<48} {"env steps/s":>12} {"batch":>6} {"latency p50 / p99 us":>22}')
    print('-' * 91)
    for what, rate, batch, latency in rows:
        print(f'{what:<48} {rate:>12.0f} {batch:>6} {latency:>22}')


if __name__ == '__main__':
    main()
