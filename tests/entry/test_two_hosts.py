"""Two hosts for real: ``ding -m parallel`` on host A, workers started by hand on host B, CartPole solved.

The hosts are two network namespaces of this machine joined by a veth pair (tests/helpers/netns.py): each has
its own ports and loopback, and the only way between them is the link, so every address a process hands out
must be one the other host can reach. The file system is shared: it is the shared directory of a real run.
Host A runs what a user types there (``ding -m parallel -c <experiment + configs/ system config> -s 0``); host B
starts its workers the documented way (``python -m ding.entry.parallel_worker --role ... --config
parallel_config.json``) once host A has written that file. Both know the run secret from ``DING_RUN_SECRET``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from tests.helpers.netns import Host, namespaces_unavailable, two_hosts
from tests.helpers.processes import ROOT, child_env
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow

EXPERIMENT = os.path.join(
    ROOT, 'dizoo', 'classic_control', 'cartpole', 'config', 'parallel', 'cartpole_dqn_two_learners_config.py'
)
SYSTEM = os.path.join(ROOT, 'configs', 'parallel_two_hosts_two_learners.py')
EXP = 'two_hosts'
SECRET = 'two-hosts-test-secret-0123456789abcdef'
HOST_B_WORKERS = (('learner', 'learner1'), ('collector', 'collector0'))
# A local run solves in 7-15 s; the tail of asynchronous DQN (docs/parallel.md) gets room, speed is not the point.
RUN_BUDGET = 300
SUMMARY = re.compile(rf'\[ding\] {EXP}: SOLVED \| stop value 195 \| env steps (\d+) \| train iters (\d+)')


@dataclass
class TwoHostRun:
    """What the module's one run left behind, checked by the tests below."""

    pipeline_code: int
    pipeline_output: str
    host_b_codes: dict[str, int | None]
    host_b_output: dict[str, str]
    left_in_a: list[int]
    coordinator_log: str
    learner1_log: str
    collector0_log: str


# The user's config on host A: the CartPole experiment, the two-host system config, and this run's changes.
USER_CONFIG = """\
base = [{experiment!r}, {system!r}]
main_config = dict(
    exp_name={exp!r},
    # the weights cross the link too: host B's collector fetches them from learner0's run service
    policy=dict(collect=dict(collector=dict(policy_transport='http'))),
    # the run service on every interface of each host; learner0 hands out its own host (host A) with its port
    service=dict(enable=True, host='0.0.0.0', port=0),
)
"""


def host_env(host: Host, host_a: Host, host_b: Host, shared: Path) -> dict[str, str]:
    """The environment on ``host``: the system config's variables, the run secret, and the interface gloo
    uses between the learners (it would take the address the machine's host name resolves to: 127.0.0.1 here)."""
    return child_env(
        DING_SHARED_DIR=str(shared),
        DING_HOST_A=host_a.address,
        DING_HOST_B=host_b.address,
        DING_RUN_SECRET=SECRET,
        GLOO_SOCKET_IFNAME=host.interface,
        DING_PROGRESS='0',
        OMP_NUM_THREADS='1',
    )


def read(path: Path) -> str:
    return path.read_text(encoding='utf-8', errors='replace') if path.exists() else ''


@pytest.fixture(scope='module')
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoHostRun]:
    reason = namespaces_unavailable()
    if reason is not None:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp('two_hosts')
    shared = work / 'shared'
    host_a_dir, host_b_dir = work / 'host_a', work / 'host_b'
    host_a_dir.mkdir()
    host_b_dir.mkdir()
    logs: list[IO[Any]] = []
    with two_hosts() as (host_a, host_b):
        config = host_a_dir / 'two_hosts_run.py'
        config.write_text(USER_CONFIG.format(experiment=EXPERIMENT, system=SYSTEM, exp=EXP), encoding='utf-8')
        try:
            pipeline_log = open(host_a_dir / 'pipeline.log', 'wb')
            logs.append(pipeline_log)
            pipeline = host_a.start(
                [sys.executable, '-m', 'ding.entry.cli', '-m', 'parallel', '-c', str(config), '-s', '0'],
                cwd=host_a_dir,
                env=host_env(host_a, host_a, host_b, shared),
                stdout=pipeline_log,
            )
            # host B: the compiled config is the one file its workers need from host A
            parallel_config = host_a_dir / EXP / 'parallel_config.json'
            wait_until(parallel_config.exists, 120, interval=0.1, what='parallel_config.json', proc=pipeline)
            workers = {}
            for role, name in HOST_B_WORKERS:
                worker_log = open(host_b_dir / f'{name}.log', 'wb')
                logs.append(worker_log)
                worker = [sys.executable, '-m', 'ding.entry.parallel_worker', '--config', str(parallel_config)]
                workers[name] = host_b.start(
                    [*worker, '--role', role, '--name', name],
                    cwd=host_b_dir,
                    env=host_env(host_b, host_a, host_b, shared),
                    stdout=worker_log,
                )
            try:
                pipeline.wait(RUN_BUDGET)
            except subprocess.TimeoutExpired:
                pass  # reported by the test on the summary line, with the output
            left_in_a = host_a.pids()
            # remote workers stay resident between runs: SIGTERM is how their host stops them
            for proc in workers.values():
                proc.terminate()
            codes: dict[str, int | None] = {}
            for name, proc in workers.items():
                try:
                    codes[name] = proc.wait(30)
                except subprocess.TimeoutExpired:
                    codes[name] = None
            yield TwoHostRun(
                pipeline_code=pipeline.returncode if pipeline.returncode is not None else -1,
                pipeline_output=read(host_a_dir / 'pipeline.log'),
                host_b_codes=codes,
                host_b_output={name: read(host_b_dir / f'{name}.log') for name in workers},
                left_in_a=left_in_a,
                coordinator_log=read(host_a_dir / EXP / 'log' / 'coordinator' / 'coordinator_logger.txt'),
                learner1_log=read(host_b_dir / EXP / 'log' / 'comm_learner1' / 'comm_learner1_logger.txt'),
                collector0_log=read(host_b_dir / EXP / 'log' / 'comm_collector0' / 'comm_collector0_logger.txt'),
            )
        finally:
            for log in logs:
                log.close()


def test_the_run_solves_cartpole_across_the_two_hosts(run: TwoHostRun) -> None:
    assert run.pipeline_code == 0, run.pipeline_output[-3000:]
    assert SUMMARY.search(run.pipeline_output), run.pipeline_output[-3000:]


def test_host_b_workers_served_the_coordinator_on_their_own_address(run: TwoHostRun) -> None:
    for name, output in run.host_b_output.items():
        assert re.search(rf'ding parallel worker {name}: serving on 10\.231\.\d+\.2:\d+', output), output[-2000:]
        assert f'connected to {name.rstrip("0123456789")} {name} (10.231.' in run.coordinator_log
    assert 'started on collector0' in run.coordinator_log  # host B's collector was given collect tasks


def test_the_learners_trained_as_one_group_across_the_hosts(run: TwoHostRun) -> None:
    # the rendezvous is on host A (learner0, rank 0), at the port the system config names
    group = r'started on 2 ranks \(learner0, learner1\), process group at tcp://10\.231\.\d+\.1:22274'
    assert re.search(group, run.coordinator_log), run.coordinator_log[-3000:]
    assert 'joining the process group as rank 1 of 2' in run.learner1_log, run.learner1_log[-3000:]
    assert re.search(r'ended \(.*\) at iteration [1-9]\d*', run.learner1_log), run.learner1_log[-3000:]


def test_host_b_collector_took_the_weights_from_host_a_over_http(run: TwoHostRun) -> None:
    assert re.search(r'loaded policy_iter [1-9]\d* from 10\.231\.\d+\.1:\d+', run.collector0_log), run.collector0_log[
        -3000:
    ]


def test_every_process_stops(run: TwoHostRun) -> None:
    assert run.left_in_a == []  # the pipeline stopped its own workers on host A
    assert run.host_b_codes == {name: 0 for _, name in HOST_B_WORKERS}, run.host_b_output
