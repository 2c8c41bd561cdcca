"""The async pipeline end to end: real EnvPool / gymnasium envs, real actor threads, the IMPALA policy."""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from ding.config import ConfigError
from ding.entry import async_pipeline
from ding.entry.async_entry import build_async_parts, run_async_loop
from ding.model.template.impala_vac import IMPALAVAC
from ding.utils.checkpoint import read_manifest
from ding.worker.async_actor import ActorError
from ding.worker.learner import LearnerHook
from tests.helpers.async_configs import cartpole_impala
from tests.helpers.processes import child_env
from tests.helpers.wait import wait_until

SHORT = dict(actor_num=2, env_per_actor=4, unroll_len=10, trajectory_queue_size=4)
NO_EVAL = dict(evaluator=dict(eval_freq=0))


def _actor_threads():
    return [t for t in threading.enumerate() if t.name.startswith('ding-actor-')]


def _summary(err: str) -> str:
    return [line for line in err.splitlines() if line.startswith('[ding] ')][-1]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('DING_PROGRESS', '0')
    yield
    assert not _actor_threads()


@pytest.mark.parametrize(
    'sections,named',
    [
        (dict(async_actor=dict(actor_nums=2)), "did you mean 'actor_num'"),
        (dict(async_actor=dict(staging_queue_size=3)), 'policy.async_actor.staging_queue_size = int 3 is out of range'),
        (dict(async_actor=dict(double_buffer='yes')), 'policy.async_actor.double_buffer: expected True or False'),
        (dict(async_actor=dict(env_per_actor=5)), 'env_per_actor = 5 must be even with double_buffer=True'),
        (dict(env=dict(env_id='')), 'env.env_id is missing'),
        (dict(async_actor=dict(cpu_affinity=[4096])), 'policy.async_actor.cpu_affinity: cores [4096] are not among'),
        (dict(async_actor=dict(cpu_affinity=0)), 'policy.async_actor.cpu_affinity: expected a non-empty list'),
    ],
)
def test_a_bad_async_config_fails_before_any_work_naming_the_key(sections, named, tmp_path):
    with pytest.raises(ConfigError, match=re.escape(named)) as info:
        async_pipeline(cartpole_impala('bad', **sections), seed=0, max_train_iter=1)
    assert named in str(info.value)
    assert not (tmp_path / 'bad').exists()


def test_unknown_async_keys_pass_with_the_escape_hatch(monkeypatch, capsys):
    monkeypatch.setenv('DING_ALLOW_UNKNOWN_KEYS', '1')
    cfg = cartpole_impala('hatch', async_actor=dict(SHORT, my_research_flag=True), eval=NO_EVAL)
    async_pipeline(cfg, seed=0, max_train_iter=1)
    assert 'train iters 1' in _summary(capsys.readouterr().err)


def test_a_policy_without_the_actor_protocol_is_refused_before_any_work(tmp_path):
    cfg, create = cartpole_impala('ppo_async')
    create.policy.type = 'ppo'
    with pytest.raises(ConfigError, match="'ppo' cannot run in the async pipeline"):
        async_pipeline((cfg, create), seed=0, max_train_iter=1)
    assert not (tmp_path / 'ppo_async').exists()


def test_a_short_run_trains_logs_the_policy_lag_and_writes_its_final_checkpoint(tmp_path, capsys):
    cfg = cartpole_impala(
        'short', async_actor=SHORT, eval=NO_EVAL, learn=dict(learner=dict(hook=dict(log_show_after_iter=10)))
    )
    policy = async_pipeline(cfg, seed=0, max_train_iter=30)
    assert policy is not None
    summary = _summary(capsys.readouterr().err)
    assert 'not solved (max_train_iter reached)' in summary and 'train iters 30' in summary
    log = (tmp_path / 'short' / 'log' / 'learner' / 'learner_logger.txt').read_text()
    assert 'policy_lag_mean' in log and 'policy_lag_max' in log
    final = tmp_path / 'short' / 'ckpt' / 'iteration_30.safetensors'
    assert final.is_file() and read_manifest(str(final))['last_iter'] == 30


def test_resume_auto_continues_from_the_newest_checkpoint(tmp_path, capsys):
    cfg = cartpole_impala('resumed', async_actor=SHORT, eval=NO_EVAL)
    async_pipeline(cfg, seed=0, max_train_iter=10)
    async_pipeline(cfg, seed=0, max_train_iter=20, resume='auto')
    summary = _summary(capsys.readouterr().err)
    assert 'train iters 20' in summary
    assert read_manifest(str(tmp_path / 'resumed' / 'ckpt' / 'iteration_20.safetensors'))['last_iter'] == 20
    assert not any(p.name.startswith('resumed_') for p in tmp_path.iterdir())  # the run kept its directory


def test_sigterm_in_process_stops_the_actors_and_writes_the_interrupt_checkpoint(tmp_path, capsys):
    learner_log = tmp_path / 'interrupted' / 'log' / 'learner' / 'learner_logger.txt'

    def terminate_after_some_training():
        wait_until(lambda: learner_log.exists() and 'policy_lag_mean' in learner_log.read_text(), 120)
        os.kill(os.getpid(), signal.SIGTERM)  # delivered to the main thread, which runs the pipeline

    killer = threading.Thread(target=terminate_after_some_training, daemon=True)
    killer.start()
    cfg = cartpole_impala(
        'interrupted', async_actor=SHORT, eval=NO_EVAL, learn=dict(learner=dict(hook=dict(log_show_after_iter=5)))
    )
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        async_pipeline(cfg, seed=0)
    killer.join(10)
    assert signal.getsignal(signal.SIGTERM) is previous  # the run's handler is gone again
    assert len(list((tmp_path / 'interrupted' / 'ckpt').glob('interrupt_iteration_*.safetensors'))) == 1
    assert 'not solved (interrupted)' in _summary(capsys.readouterr().err)


class FailingModel(IMPALAVAC):
    """Acts normally for a few steps, then fails (only actor threads call ``act``)."""

    def __init__(self, *args, fail_after: int = 5, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = 0
        self.fail_after = fail_after

    def feedforward_actor(self):
        return None  # no numpy chain: the actors call act

    def act(self, obs, state, first):
        self.calls += 1
        if self.calls > self.fail_after:
            raise FloatingPointError('actor model failed on purpose')
        return super().act(obs, state, first)


def test_an_actor_failure_stops_the_run_and_is_raised_with_its_traceback(capsys):
    torch.manual_seed(0)
    model = FailingModel(obs_shape=4, action_shape=2, encoder_hidden_size_list=[16])
    with pytest.raises(ActorError, match='actor model failed on purpose') as info:
        async_pipeline(cartpole_impala('failing', async_actor=SHORT, eval=NO_EVAL), seed=0, model=model)
    assert isinstance(info.value.__cause__, FloatingPointError)
    tb = info.value.__cause__.__traceback__
    names = []
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert 'actor_step' in names and names[-1] == 'act'
    assert 'not solved (error: ActorError)' in _summary(capsys.readouterr().err)


CLI_CONFIG = """
from tests.helpers.async_configs import cartpole_impala

main_config, create_config = cartpole_impala(
    'cli_async',
    env=dict(backend='gymnasium', evaluator_env_num=1, n_evaluator_episode=1),
    async_actor=dict(actor_num=1, env_per_actor=4, unroll_len=10),
    eval=dict(evaluator=dict(eval_freq=0)),
    learn=dict(learner=dict(hook=dict(log_show_after_iter=5))),
)
"""


def _children(pid: int) -> set[int]:
    found = set()
    for tid in os.listdir(f'/proc/{pid}/task'):
        try:
            with open(f'/proc/{pid}/task/{tid}/children') as f:
                found.update(int(c) for c in f.read().split())
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


@pytest.mark.slow
def test_sigterm_stops_a_cli_run_leaving_no_env_process_and_writing_a_checkpoint(tmp_path):
    (tmp_path / 'cfg.py').write_text(CLI_CONFIG)
    log = open(tmp_path / 'run.log', 'wb')
    proc = subprocess.Popen(
        [sys.executable, '-m', 'ding.entry.cli', '-m', 'async', '-c', 'cfg.py', '-s', '0'],
        cwd=tmp_path,
        env=child_env(DING_PROGRESS='0', OMP_NUM_THREADS='1'),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        learner_log = tmp_path / 'cli_async' / 'log' / 'learner' / 'learner_logger.txt'
        wait_until(
            lambda: learner_log.exists() and 'policy_lag_mean' in learner_log.read_text(),
            240,
            what='the first logged iterations',
            proc=proc,
        )
        env_processes = _children(proc.pid)
        assert len(env_processes) >= 4  # gymnasium's AsyncVectorEnv: one process per env
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            tail = (tmp_path / 'run.log').read_text()[-3000:]
            pytest.fail(f'the run did not stop within 120 s of SIGTERM; its output ends with:\n{tail}')
        assert code == 130
        wait_until(lambda: not any(_alive(p) for p in env_processes), 30, what='the env processes to end')
        output = (tmp_path / 'run.log').read_text()
        assert 'checkpoint written by this run' in output and 'not solved (interrupted)' in output
        ckpts = list((tmp_path / 'cli_async' / 'ckpt').glob('interrupt_iteration_*.safetensors'))
        assert len(ckpts) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


@pytest.mark.slow
def test_impala_solves_cartpole_with_the_async_pipeline(tmp_path, capsys):
    started = time.perf_counter()
    async_pipeline(cartpole_impala('solve'), seed=0, max_env_step=int(5e5))
    summary = _summary(capsys.readouterr().err)
    assert 'SOLVED' in summary, summary
    assert (tmp_path / 'solve' / 'ckpt' / 'ckpt_best.safetensors').is_file()
    assert time.perf_counter() - started < 300


class RecordThreadCores(LearnerHook):
    """At iteration 3, records the cores of every thread of this process (``ext_args['seen']``: tid -> cores)."""

    def __call__(self, engine):
        if engine.last_iter.val == 3:
            for tid in os.listdir('/proc/self/task'):
                self.ext_args['seen'][int(tid)] = os.sched_getaffinity(int(tid))


@pytest.mark.skipif(not hasattr(os, 'sched_setaffinity'), reason='thread affinity is Linux-only')
def test_cpu_affinity_confines_the_learner_actor_and_envpool_threads_while_the_run_lasts(capsys):
    core, before = max(os.sched_getaffinity(0)), os.sched_getaffinity(0)
    threads_before = {int(tid) for tid in os.listdir('/proc/self/task')}
    cfg, create = cartpole_impala('pinned', async_actor=dict(SHORT, cpu_affinity=[core]), eval=NO_EVAL)
    parts = build_async_parts(cfg, create, 0, None, None)
    seen: dict[int, set[int]] = {}
    parts.learner.register_hook(RecordThreadCores('cores', 50, position='after_iter', ext_args={'seen': seen}))
    run_async_loop(parts, max_train_iter=5, max_env_step=None)
    assert 'train iters 5' in _summary(capsys.readouterr().err)
    started = {tid: cores for tid, cores in seen.items() if tid not in threads_before}
    # 2 actor threads and at least one EnvPool worker per actor's pool, all on the one core
    assert len(started) >= 4 and all(cores == {core} for cores in started.values()), started
    assert seen[threading.get_native_id()] == {core}  # the learner (this thread) too, while the run lasted
    assert os.sched_getaffinity(0) == before  # and its cores back afterwards
