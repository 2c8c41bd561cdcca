"""The parallel pipeline on CartPole DQN: time to the stop value, learner speed, memory of all processes.

1. Time to solve with 1, 2 and 4 collectors (seeds 0 1 2): each run is a fresh ``ding -m parallel``
   process on the parallel CartPole config (``collector_num`` overridden), so process start-up, worker
   start-up and shutdown all count. The summed resident memory of the pipeline and every worker is
   sampled from /proc every 0.2 s; its peak is reported (RSS, and PSS which counts shared pages once).
2. Learner iterations/s, parallel against serial, two ways:

   * parallel: a ``parallel_pipeline`` run of the parallel config (2 collectors, paced by the coordinator's
     ``max_samples_per_iter``, stop value out of reach) for ``--learner-iters`` iterations.
     - wall it/s: the median of the learner's own ``it/s`` log lines (100 iterations each, the first 100
       left out: they wait for the first 512 samples, when collectors are the bottleneck);
     - CPU it/s: iterations per CPU second of the whole learner process (every thread: training, data
       loader, HTTP tasks, sample reads, policy files), from the first learn info to the last, from the comm
       learner's end-of-run log line (which also gives the training thread's own CPU seconds: the ratio
       of that alone shows what the other threads cost); that line also gives the seconds the learner
       waited with no batch received (``starved``: the wait for the first 512 samples included; the rest is
       time in which the coordinator, not the learner, was the limit).
   * serial: ``BaseLearner.train`` on the same DQN policy, same batch size, batches of real CartPole
     samples, in one process; wall it/s and CPU it/s (``time.process_time``) over 2000 iterations.

   What is fair to compare: the serial learner has the machine to itself, while the parallel learner shares
   it with the coordinator and two collectors (four busy processes on a 2-core machine, plus whatever else
   runs there). The target, "parallel learner >= 0.8 x serial when collectors are not the bottleneck", is
   about the learner process's own cost per iteration when data is always there, so the CPU ratio is the
   one to hold to the target; the wall ratio is printed too and equals it only where the coordinator and
   the collectors have cores of their own. Both sides run with one torch thread (``OMP_NUM_THREADS=1``).

    python benchmarks/parallel_cartpole.py                       # everything (~10 minutes on 2 cores)
    python benchmarks/parallel_cartpole.py --collectors 2 --seeds 0 --skip-learner
    python benchmarks/parallel_cartpole.py --learner-only --learner-iters 1000 --repeat 6
    python benchmarks/parallel_cartpole.py --collectors 2 --skip-learner --rounds 3 \\
        --set system.coordinator.max_samples_per_iter=2.5          # a config variant, each seed 3 times

Targets: parallel learner CPU it/s >= 0.8 x serial; solve with 2 collectors <= 15 s; summed RSS <= 1 GB.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_MODULE = 'dizoo.classic_control.cartpole.config.parallel.cartpole_dqn_config'
SUMMARY = re.compile(
    r'\[ding\] (?P<exp>\S+): (?P<status>SOLVED|not solved[^|]*?) ?\|.*env steps (?P<steps>\d+) \| '
    r'train iters (?P<iters>\d+) \| wall (?P<wall>[\d.]+)s (?:\(set-up [\d.]+s\) )?\|.*best eval return (?P<best>\S+)'
)
IT_S = re.compile(r'iteration (\d+): averages over \d+ iterations \(([\d.]+) it/s\)')
RUN_END = re.compile(
    r'([\d.]+)s waiting with no batch received; from the first learn info to the last: (\d+) '
    r'iterations in ([\d.]+)s wall, ([\d.]+)s process CPU \(([\d.]+)s of it in the training thread\)'
)


# ---- memory of a process tree, from /proc ------------------------------------------------------------
def _children(pid: int) -> list[int]:
    out = []
    try:
        with open(f'/proc/{pid}/task/{pid}/children') as f:
            out = [int(p) for p in f.read().split()]
    except OSError:
        pass
    return out


def _field_kb(path: str, field: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_memory_mb(root_pid: int) -> tuple:
    """(summed RSS, summed PSS) in MB of ``root_pid`` and all its descendants.

    RSS counts pages shared between processes (torch's libraries) once per process; PSS splits them.
    """
    rss = pss = 0
    todo, seen = [root_pid], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        rss += _field_kb(f'/proc/{pid}/status', 'VmRSS:')
        pss += _field_kb(f'/proc/{pid}/smaps_rollup', 'Pss:')
        todo.extend(_children(pid))
    return rss / 1024, pss / 1024


class PeakMemory(threading.Thread):
    """Samples the summed memory of a process tree; keeps the peaks."""

    def __init__(self, pid: int, period: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.period, self._halt = pid, period, threading.Event()
        self.peak_rss = self.peak_pss = 0.0

    def run(self) -> None:
        while not self._halt.wait(self.period):
            rss, pss = tree_memory_mb(self.pid)
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)

    def stop(self) -> tuple:
        self._halt.set()
        self.join()
        return self.peak_rss, self.peak_pss


# ---- runs --------------------------------------------------------------------------------------------
def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=ROOT, DING_PROGRESS='0', DING_QUIET='1', OMP_NUM_THREADS='1')


def _override_lines(overrides: list[str]) -> str:
    """``main.policy.learn.batch_size=32`` / ``system.coordinator.max_samples_per_iter=2.5`` as config lines."""
    lines = []
    for item in overrides:
        key, sep, value = item.partition('=')
        root, _, path = key.partition('.')
        if not sep or root not in ('main', 'system') or not path:
            raise SystemExit(f'--set {item!r}: expected main.KEY.PATH=VALUE or system.KEY.PATH=VALUE')
        *parents, leaf = path.split('.')
        target = f'{root}_config' + ''.join(f'[{p!r}]' for p in parents)
        lines.append(f'{target}[{leaf!r}] = {value}')
    return '\n'.join(lines)


def solve_once(collectors: int, seed: int, workdir: str, timeout: float, overrides: list[str] = ()) -> dict:
    """One ``ding -m parallel`` process to the stop value; wall time, summary figures, peak summed RSS."""
    exp = f'bench_parallel_c{collectors}_seed{seed}'
    cfg_file = os.path.join(workdir, f'{exp}_config.py')
    with open(cfg_file, 'w') as f:
        f.write(
            textwrap.dedent(f"""
            from {CONFIG_MODULE} import main_config, create_config, system_config
            main_config.exp_name = {exp!r}
            main_config.policy.collect.collector.collector_num = {collectors}
        """)
            + _override_lines(list(overrides))
            + '\n'
        )
    cmd = [sys.executable, '-m', 'ding.entry.cli', '-m', 'parallel', '-c', cfg_file, '-s', str(seed)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=workdir, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    mem = PeakMemory(proc.pid)
    mem.start()
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        _, err = proc.communicate()
    wall = time.perf_counter() - start
    peak_rss, peak_pss = mem.stop()
    match = SUMMARY.search(err or '')
    if match is None:
        raise RuntimeError(f'{exp} failed (exit {proc.returncode}):\n{(err or "")[-3000:]}')
    return dict(
        collectors=collectors,
        seed=seed,
        solved=match['status'] == 'SOLVED',
        wall=wall,
        run_wall=float(match['wall']),
        steps=int(match['steps']),
        iters=int(match['iters']),
        best=match['best'],
        rss_mb=peak_rss,
        pss_mb=peak_pss,
    )


def parallel_learner_rate(workdir: str, iters: int) -> dict[str, float]:
    """A paced run of ``iters`` iterations: ``wall`` (median it/s of the learner's log lines after the first
    100), ``cpu`` (iterations per learner-process CPU second) and ``starved`` (seconds with no batch)."""
    exp = 'bench_parallel_learner'
    script = textwrap.dedent(f"""
        from {CONFIG_MODULE} import main_config, create_config, system_config
        from ding.entry.parallel_entry import parallel_pipeline
        main_config.exp_name = {exp!r}
        main_config.env.stop_value = 1e9  # train for the iteration budget only
        parallel_pipeline((main_config, create_config, system_config), 0, max_train_iter={iters})
    """)
    subprocess.run(
        [sys.executable, '-c', script],
        cwd=workdir,
        env=_env(),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=600,
    )
    with open(os.path.join(workdir, exp, 'log', 'learner0', 'learner0_logger.txt')) as f:
        rates = [float(r) for it, r in IT_S.findall(f.read()) if int(it) > 100]
    with open(os.path.join(workdir, exp, 'log', 'comm_learner0', 'comm_learner0_logger.txt')) as f:
        end = RUN_END.findall(f.read())
    if not rates or not end:
        raise RuntimeError(f'{exp}: no learner rates in the logs under {workdir}/{exp}/log')
    starved, n, wall, cpu, training = end[-1]
    shutil.rmtree(os.path.join(workdir, exp), ignore_errors=True)  # the next repeat starts afresh
    return dict(
        wall=statistics.median(rates),
        cpu=int(n) / float(cpu),
        starved=float(starved),
        run_wall=float(wall),
        training=int(n) / float(training),
    )


def serial_learner_rate(workdir: str, iters: int) -> dict[str, float]:
    """``BaseLearner.train`` on the parallel config's DQN policy, batches of real CartPole samples: ``wall``
    and ``cpu`` (per process CPU second) it/s."""
    script = textwrap.dedent(f"""
        import random, time, torch
        from ding.config.parallel import compile_config_parallel
        from ding.envs import get_vec_env_setting
        from ding.policy import create_policy
        from ding.worker.learner import BaseLearner
        from {CONFIG_MODULE} import main_config, create_config, system_config
        torch.set_num_threads(1)
        main_config.exp_name = 'bench_serial_learner'
        cfg = compile_config_parallel(main_config, create_config, system_config, seed=0, save_cfg=False).main
        policy = create_policy(cfg.policy, enable_field=['learn', 'collect'])
        env_fn, env_cfgs, _ = get_vec_env_setting(cfg.env, eval_=False)
        env = env_fn(cfg=env_cfgs[0])
        env.seed(0)
        obs, samples = env.reset(), []
        while len(samples) < 2000:  # real transitions, random actions
            action = torch.tensor(random.randrange(2))
            ts = env.step(action)
            samples.append(policy.collect_mode.process_transition(obs, {{'action': action}}, ts))
            obs = env.reset() if ts.done else ts.obs
        env.close()
        samples = policy.collect_mode.get_train_sample(samples)
        learner = BaseLearner(cfg.policy.learn.learner, policy.learn_mode, exp_name='bench_serial_learner')
        batch = cfg.policy.learn.batch_size
        for _ in range(100):
            learner.train(random.sample(samples, batch))
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in range({iters}):
            learner.train(random.sample(samples, batch))
        print({iters} / (time.perf_counter() - start), {iters} / (time.process_time() - start_cpu))
        learner.close()
    """)
    out = subprocess.run(
        [sys.executable, '-c', script], cwd=workdir, env=_env(), check=True, capture_output=True, text=True, timeout=600
    )
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return dict(wall=float(wall), cpu=float(cpu))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--collectors', nargs='+', type=int, default=[1, 2, 4])
    parser.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    parser.add_argument('--timeout', type=float, default=300.0, help='seconds before a run is given up')
    parser.add_argument('--learner-iters', type=int, default=1000)
    parser.add_argument('--skip-learner', action='store_true', help='only the time-to-solve runs')
    parser.add_argument('--learner-only', action='store_true', help='only the learner it/s comparison')
    parser.add_argument(
        '--repeat',
        type=int,
        default=3,
        help='learner comparisons (parallel, serial in turn); the median ratio is the figure',
    )
    parser.add_argument('--rounds', type=int, default=1, help='time-to-solve runs per collector count and seed')
    parser.add_argument(
        '--set',
        action='append',
        default=[],
        metavar='ROOT.KEY=VALUE',
        help='override a config value of the time-to-solve runs (a Python literal), e.g. '
        'system.coordinator.max_samples_per_iter=2.5 or main.policy.learn.batch_size=32',
    )
    args = parser.parse_args()
    if args.learner_only and args.skip_learner:
        parser.error('--learner-only and --skip-learner exclude each other')
    workdir = tempfile.mkdtemp(prefix='ding_parallel_bench_')
    load_before = os.getloadavg()  # the machine is shared: figures only compare at similar load
    rows = []
    try:
        for n in [] if args.learner_only else args.collectors:
            for seed in [s for _ in range(args.rounds) for s in args.seeds]:
                row = solve_once(n, seed, workdir, args.timeout, args.set)
                rows.append(row)
                print(
                    f'  {n} collector(s), seed {seed}: {"solved" if row["solved"] else "NOT solved"} in '
                    f'{row["wall"]:.1f}s',
                    file=sys.stderr,
                )
        rates: list[tuple] = []
        if not args.skip_learner:
            # serial, parallel, serial, parallel, ..., serial: each parallel run is compared with the mean of
            # the serial runs just before and after it, so a drift of the (virtual) machine's speed during
            # the comparison shows in both sides instead of in the ratio
            before = serial_learner_rate(workdir, 2000)
            for _ in range(args.repeat):
                par = parallel_learner_rate(workdir, args.learner_iters)
                after = serial_learner_rate(workdir, 2000)
                rates.append((par, {k: (before[k] + after[k]) / 2 for k in before}))
                before = after
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    if rows:
        print_solve_table(rows, args.collectors)
    for par, ser in rates:
        print(
            f'learner it/s: parallel {par["wall"]:.1f} wall ({par["starved"]:.1f}s of {par["run_wall"]:.1f}s with '
            f'no batch, warm-up included), {par["cpu"]:.1f} per CPU s | serial (mean of the runs before and '
            f'after) {ser["wall"]:.1f} wall, {ser["cpu"]:.1f} per CPU s | '
            f'ratio: CPU {par["cpu"] / ser["cpu"]:.2f} (training thread alone {par["training"] / ser["cpu"]:.2f}), '
            f'wall {par["wall"] / ser["wall"]:.2f}'
        )
    if len(rates) > 1:
        print(
            f'median ratio over {len(rates)} comparisons: CPU '
            f'{statistics.median(p["cpu"] / s["cpu"] for p, s in rates):.2f}, wall '
            f'{statistics.median(p["wall"] / s["wall"] for p, s in rates):.2f}'
        )
    load_after = os.getloadavg()
    print(
        f'load average (1/5/15 min): {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f} at start, '
        f'{load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f} at end, {os.cpu_count()} cores'
    )
    print('targets: CPU ratio >= 0.8; 2 collectors <= 15 s; summed RSS <= 1024 MB')


def print_solve_table(rows: list[dict], collectors: list[int]) -> None:
    header = (
        f'{"collectors":>10} {"seed":>4} {"solved":>6} {"wall s":>7} {"run s":>6} {"env steps":>9} '
        f'{"iters":>6} {"best ret":>8} {"sum RSS MB":>10} {"sum PSS MB":>10}'
    )
    print(header)
    print('-' * len(header))
    for r in rows:
        print(
            f'{r["collectors"]:>10} {r["seed"]:>4} {str(r["solved"]):>6} {r["wall"]:>7.1f} {r["run_wall"]:>6.1f} '
            f'{r["steps"]:>9} {r["iters"]:>6} {r["best"]:>8} {r["rss_mb"]:>10.0f} {r["pss_mb"]:>10.0f}'
        )
    print('-' * len(header))
    for n in collectors:
        sel = [r for r in rows if r['collectors'] == n]
        print(
            f'{n} collector(s): median wall {statistics.median(r["wall"] for r in sel):.1f}s '
            f'(slowest {max(r["wall"] for r in sel):.1f}s), env steps '
            f'{statistics.median(r["steps"] for r in sel):.0f}, '
            f'iters {statistics.median(r["iters"] for r in sel):.0f}, '
            f'peak summed RSS {max(r["rss_mb"] for r in sel):.0f} MB (PSS {max(r["pss_mb"] for r in sel):.0f} MB), '
            f'solved {sum(r["solved"] for r in sel)}/{len(sel)}'
        )


if __name__ == '__main__':
    main()
