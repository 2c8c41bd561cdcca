"""The replay service against the in-process buffer, and a replay outage.

    python benchmarks/replay_service.py [--iters 600] [--rounds 3] [--part both|speed|outage]

Part ``speed``: PPO and DQN on CartPole (their dizoo configs). One collector fills 4000 real transitions; then
the same learner runs ``--iters`` iterations reading (a) ``buffer.sample`` of an in-process naive buffer and
(b) ``RemoteReplayBuffer.sample`` (prefetch_depth 4) from a ``ding replay-server`` process on 127.0.0.1 holding the
same transitions; rounds interleaved, median rate. Prints iterations per second, the ratio (target >= 0.9), the
Sample call latency p50 / p99 (one call draws prefetch_depth batches), the share of the learner's time spent
waiting for a batch, and the ratio of iterations per CPU second of the learner's process (its own overhead,
steadier than wall clock on a shared machine; the server's CPU is not in it).

Part ``outage``: ``ding replay-server`` + ``ding replay-feed`` + ``ding learner`` (DQN, stop value 195); once the
learner trains, the server is SIGKILLed, restarted empty on the same port 10 s later and refilled by the
collector. Prints when the learner went degraded and came back, and whether it solved.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault('OMP_NUM_THREADS', '1')

from ding.config import read_config  # noqa: E402
from ding.config.parallel import find_free_port  # noqa: E402
from ding.entry.pipeline_parts import build_serial_parts  # noqa: E402
from ding.worker.replay_buffer import create_buffer  # noqa: E402
from ding.worker.replay_service import RemoteReplayBuffer, check_replay_client_config  # noqa: E402
from tests.helpers.replay_processes import SECRET, DingProcess, replay_server, stop_all  # noqa: E402

CONFIGS = {
    'DQN': 'dizoo/classic_control/cartpole/config/cartpole_dqn_config.py',
    'PPO': 'dizoo/classic_control/cartpole/config/cartpole_ppo_config.py',
}


def collect(parts, n: int) -> list:
    data: list = []
    while len(data) < n:
        data += parts.collector.collect(train_iter=0, policy_kwargs=parts.commander.step())
    return data[:n]


def timed_loop(learner, sample, iters: int, batch_size: int) -> tuple[float, float, float]:
    """(iterations per second, seconds spent in ``sample``, iterations per CPU second of this process)."""
    waited = 0.0
    c0 = time.process_time()
    t0 = time.perf_counter()
    done = 0
    while done < iters:
        s0 = time.perf_counter()
        batch = sample(batch_size, learner.train_iter)
        waited += time.perf_counter() - s0
        if batch is None:
            continue
        learner.train(batch)
        done += 1
    return iters / (time.perf_counter() - t0), waited, iters / (time.process_time() - c0)


def speed(name: str, iters: int, rounds: int, workdir: str) -> dict:
    cfg, create_cfg, _ = read_config(os.path.join(ROOT, CONFIGS[name]))
    cfg.exp_name = f'{workdir}/bench_{name.lower()}'
    parts = build_serial_parts(cfg, create_cfg, 0, None, None, True, None, with_buffer=False)
    batch_size = parts.cfg.policy.learn.batch_size
    data = collect(parts, 4000)
    local = create_buffer(dict(type='naive', replay_buffer_size=10000))
    local.push(data)
    port = find_free_port()
    server = replay_server(workdir, port, '--size', '10000')
    latencies: list[float] = []
    client_cfg = check_replay_client_config(dict(replay_address=f'127.0.0.1:{port}', prefetch_depth=4))
    remote = RemoteReplayBuffer(
        client_cfg, batch_size, SECRET, observe=lambda status, s: latencies.append(s) if status == 'ok' else None
    )
    try:
        remote.push(data)
        timed_loop(parts.learner, remote.sample, 20, batch_size)  # warm up both paths
        timed_loop(parts.learner, local.sample, 20, batch_size)
        local_rates, remote_rates, wait_shares, local_cpu, remote_cpu = [], [], [], [], []
        for _ in range(rounds):
            rate, _, cpu_rate = timed_loop(parts.learner, local.sample, iters, batch_size)
            local_rates.append(rate)
            local_cpu.append(cpu_rate)
            latencies.clear()
            t0 = time.perf_counter()
            rate, waited, cpu_rate = timed_loop(parts.learner, remote.sample, iters, batch_size)
            remote_rates.append(rate)
            remote_cpu.append(cpu_rate)
            wait_shares.append(waited / (time.perf_counter() - t0))
        latencies.sort()
        return {
            'algo': name,
            'batch': batch_size,
            'local': statistics.median(local_rates),
            'remote': statistics.median(remote_rates),
            'p50_ms': 1e3 * latencies[len(latencies) // 2],
            'p99_ms': 1e3 * latencies[int(len(latencies) * 0.99)],
            'wait': statistics.median(wait_shares),
            'cpu_ratio': statistics.median(remote_cpu) / statistics.median(local_cpu),
        }
    finally:
        remote.close()
        server.stop()
        for close in parts.closables:
            close()


def outage(workdir: str, seconds: float) -> None:
    config = os.path.join(workdir, 'cartpole_dqn_replay.py')
    with open(config, 'w') as f:
        f.write('from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config\n')
    taken: set[int] = set()  # two different ports
    replay_port, weights_port = find_free_port(taken=taken), find_free_port(taken=taken)
    replay, weights = f'127.0.0.1:{replay_port}', f'127.0.0.1:{weights_port}'
    processes = [replay_server(workdir, replay_port)]
    try:
        learner = DingProcess(
            ['learner', '-c', config, '--replay', replay, '--weights', weights, '--run-id', 'outage'], workdir
        )
        processes.append(learner)
        processes.append(DingProcess(['replay-feed', '-c', config, '--replay', replay, '--weights', weights], workdir))
        assert learner.wait_for('replay service: waiting -> ok', 120), learner.text()[-2000:]
        t0 = time.monotonic()
        processes[0].kill()
        degraded = learner.wait_for('ok -> degraded', 30)
        t_degraded = time.monotonic() - t0
        time.sleep(max(0.0, seconds - t_degraded))
        processes[0] = replay_server(workdir, replay_port)
        t_restart = time.monotonic() - t0
        learner.wait_for('degraded -> waiting', 60)
        back = learner.wait_for('waiting -> ok', 60)
        t_back = time.monotonic() - t0
        solved = learner.wait_for('SOLVED', 300)
        summary = next((line.strip() for line in learner.lines if 'SOLVED' in line or '| wall' in line), '')
        print(f'\noutage of {t_restart:.1f} s (SIGKILL, restart empty on the same port, the collector refills it)')
        print(f'  degraded after {t_degraded:.2f} s: {degraded}; training again {t_back - t_restart:.2f} s after the')
        print(f'  restart: {back}; solved: {solved}')
        print(f'  {summary[summary.find("[ding]") :]}')
    finally:
        stop_all(processes[::-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument('--iters', type=int, default=600)
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--outage-seconds', type=float, default=10.0)
    p.add_argument('--part', choices=('both', 'speed', 'outage'), default='both')
    args = p.parse_args()
    os.environ['DING_RUN_SECRET'] = SECRET
    with tempfile.TemporaryDirectory() as workdir:
        os.chdir(workdir)
        if args.part in ('both', 'speed'):
            rows = [speed(name, args.iters, args.rounds, workdir) for name in CONFIGS]
            print(f'\n{"algo":5} {"batch":>5} {"in-process it/s":>16} {"replay it/s":>12} {"ratio":>6} ', end='')
            print(f'{"Sample p50 ms":>14} {"p99 ms":>7} {"wait share":>10} {"CPU ratio":>9}')
            for r in rows:
                print(
                    f'{r["algo"]:5} {r["batch"]:>5} {r["local"]:>16.1f} {r["remote"]:>12.1f} '
                    f'{r["remote"] / r["local"]:>6.2f} {r["p50_ms"]:>14.2f} {r["p99_ms"]:>7.2f} {r["wait"]:>10.1%} {r["cpu_ratio"]:>9.2f}'
                )
        if args.part in ('both', 'outage'):
            outage(workdir, args.outage_seconds)


if __name__ == '__main__':
    main()
