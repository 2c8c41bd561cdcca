"""Remote SEED actors over TCP on 127.0.0.1, in a real SEED DQN run beside a one-host (shared-memory) actor.

One run serves the whole module: it is built from a config file that listens for remote actors
(``policy.seed.listen``), runs on a thread with a run service (JSON log only, for pause / terminate), and has
actor 0 on shared memory (started by the pipeline), actor 1 a real ``ding seed-actor`` process, and actor 2 a
hand-made ZeroMQ peer of this test. The tests run in file order on it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import zmq

from ding.config import read_config
from ding.entry.cli import main as cli_main
from ding.entry.seed_entry import build_seed_parts, run_seed_loop
from ding.worker.seed.remote import RemoteActorClient
from ding.worker.seed.remote_actor import actor_settings
from ding.worker.seed.transport import (
    RUN_SECRET_ENV,
    SlotLayout,
    TransportError,
    new_secret,
    parse_address,
    signed_join,
)
from tests.helpers.processes import ROOT, child_env
from tests.helpers.wait import wait_until

ENVS = 4
LAYOUT = SlotLayout(ENVS, (4,), 2)
CONFIG = f"""
base = '{ROOT}/dizoo/classic_control/cartpole/config/cartpole_seed_dqn_config.py'
main_config = dict(
    exp_name='remote_seed_dqn',
    env=dict(backend='gymnasium'),  # starts faster than EnvPool in the actor processes
    service=dict(json_log=True),
    policy=dict(
        eval=dict(evaluator=dict(eval_freq=0)),
        learn=dict(update_per_collect=2),
        seed=dict(actor_num=1, env_per_actor={ENVS}, unroll_len=4, listen='127.0.0.1:0', remote_actor_num=2),
    ),
)
"""


class RemoteRun:
    """The pipeline on a thread, and the ``ding seed-actor`` process."""

    def __init__(self, workdir: str, secret: str) -> None:
        self.config = f'{workdir}/remote_config.py'
        with open(self.config, 'w') as f:
            f.write(textwrap.dedent(CONFIG))
        self.secret = secret
        main, create, _ = read_config(self.config)
        self.parts = build_seed_parts(main, create, 0, None, None, None)
        self.server = self.parts.server
        self.control = self.parts.service.control
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name='seed-run', daemon=True)
        self.remote_actor: subprocess.Popen[str] | None = None

    def _run(self) -> None:
        try:
            run_seed_loop(self.parts, None, None)
        except BaseException as exc:
            self.error = exc

    def seed_actor(self, actor_id: int, token: str) -> subprocess.Popen[str]:
        """``ding seed-actor`` joining this run as ``actor_id`` with ``token``."""
        argv = ['--connect', self.server.remote_address, '--actor-id', str(actor_id), '-c', self.config]
        return subprocess.Popen(
            [sys.executable, '-m', 'ding.entry.cli', 'seed-actor', *argv],
            env=child_env(**{RUN_SECRET_ENV: token}),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def requests_of(self, actor_id: int) -> int:
        return self.server.stats.requests_of(actor_id)


@pytest.fixture(scope='module')
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp('remote')
    secret = new_secret()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(workdir)
        patch.setenv('DING_PROGRESS', '0')
        patch.setenv(RUN_SECRET_ENV, secret)
        run = RemoteRun(str(workdir), secret)
        try:
            run.thread.start()
            run.remote_actor = run.seed_actor(1, secret)
            yield run
        finally:
            run.control.request_terminate()
            run.thread.join(60)
            if run.remote_actor is not None:
                try:
                    run.remote_actor.wait(30)
                finally:
                    if run.remote_actor.poll() is None:
                        run.remote_actor.kill()
                        run.remote_actor.wait()
    assert not run.thread.is_alive() and run.error is None, run.error
    assert run.remote_actor.returncode == 0  # the run ended: the remote actor exits cleanly too


def test_a_remote_actor_joins_beside_the_local_one_and_is_served(run):
    wait_until(lambda: run.server.joined() == [0, 1], 60, what='the shm actor 0 and the remote actor 1 joined')
    wait_until(lambda: run.requests_of(1) >= 20, 30, what='20 requests of the remote actor answered')
    assert run.requests_of(0) > 0


def test_the_learner_trains_on_the_remote_steps(run):
    learner = run.parts.learner
    wait_until(lambda: learner.train_iter >= 4, 60, what='4 DQN updates')
    # unroll_len 4: a chunk of the remote actor reaches the learner once it was answered 4 times (and more)
    assert run.requests_of(1) >= 8 and run.parts.feed.envstep > 0
    assert run.server.stats.snapshot()['dropped_actors'] == 0


def test_a_wrong_token_is_refused_and_counted(run):
    refused = run.server.stats.refused_joins
    client = RemoteActorClient(run.server.remote_address, new_secret(), 2, LAYOUT)
    try:
        with pytest.raises(TransportError, match='refused the join: is the token right'):
            client.join()
    finally:
        client.close()
    assert run.server.stats.refused_joins == refused + 1
    assert run.server.joined() == [0, 1]


def _joined_peer(run, actor_id: int) -> RemoteActorClient:
    client = RemoteActorClient(run.server.remote_address, run.secret, actor_id, LAYOUT, timeout=30.0)
    client.join()
    return client


def test_garbage_drops_that_actor_and_the_others_keep_being_served(run):
    stats = run.server.stats
    dropped, bad = stats.dropped_actors, stats.bad_messages
    obs, zeros, flags = np.zeros((ENVS, 4), np.float32), np.zeros(ENVS, np.float32), np.zeros(ENVS, bool)
    peer = _joined_peer(run, 2)
    stranger = zmq.Context.instance().socket(zmq.DEALER)
    try:
        assert peer.request(obs, zeros, flags, flags).shape == (ENVS,)  # a valid step is answered
        stranger.setsockopt(zmq.LINGER, 0)
        stranger.connect(f'tcp://{run.server.remote_address}')
        stranger.send_multipart([b'STEP', b'\0' * 64])  # never joined: ignored, counted
        stranger.send_multipart([b'JOIN', signed_join(run.secret, b'\0' * 16, 2, LAYOUT)])  # no nonce asked: ignored
        # A joined actor's observations with a NaN: the message is refused and the actor dropped.
        with pytest.raises(TransportError, match='dropped this actor'):
            peer.request(np.full((ENVS, 4), np.nan, np.float32), zeros, flags, flags)
    finally:
        peer.close()
        stranger.close(0)
    wait_until(lambda: stats.dropped_actors == dropped + 1, 10, what='actor 2 dropped')
    wait_until(lambda: stats.bad_messages == bad + 3, 10, what="the stranger's two messages and the NaN counted")
    before = run.requests_of(0), run.requests_of(1)
    wait_until(
        lambda: run.requests_of(0) > before[0] and run.requests_of(1) > before[1], 30, what='actors 0 and 1 served'
    )
    assert run.server.joined() == [0, 1]


def test_a_remote_actor_that_leaves_is_dropped_at_once_and_its_id_can_join_again(run):
    dropped, bad = run.server.stats.dropped_actors, run.server.stats.bad_messages
    _joined_peer(run, 2).close()  # says QUIT
    wait_until(lambda: run.server.stats.dropped_actors == dropped + 1, 10, what='actor 2 dropped on its QUIT')
    _joined_peer(run, 2).close()
    wait_until(lambda: run.server.stats.dropped_actors == dropped + 2, 10, what='actor 2 joined and left again')
    assert run.server.stats.bad_messages == bad and run.server.joined() == [0, 1]


def test_a_paused_run_answers_no_actor_and_resume_answers_them(run):
    run.control.request_pause()
    wait_until(lambda: run.server.paused, 30, what='the server paused with the run')
    time.sleep(0.2)  # a forward that was running when the pause came has finished
    served = run.requests_of(0), run.requests_of(1)
    time.sleep(1.0)
    assert (run.requests_of(0), run.requests_of(1)) == served  # nothing answered while paused
    run.control.request_resume()
    wait_until(lambda: run.requests_of(0) > served[0] and run.requests_of(1) > served[1], 30, what='served again')
    assert not run.server.paused


def test_a_remote_actor_refuses_an_env_id_that_names_a_module_and_a_bad_address():
    with pytest.raises(ValueError, match=r"cfg\.py: env\.env_id 'evil\.module:Env' names a module to import"):
        actor_settings({'env': {'env_id': 'evil.module:Env'}}, 'cfg.py')
    with pytest.raises(ValueError, match=r'policy\.seed\.env_per_actor must be an int'):
        actor_settings({'env': {'env_id': 'CartPole-v1'}, 'policy': {'seed': {'env_per_actor': 0}}}, 'cfg.py')
    assert actor_settings({'env': {'env_id': 'CartPole-v1'}}, 'cfg.py')[1:] == (8, 60.0)
    assert parse_address('learner-1.example:7777', '--connect') == ('learner-1.example', 7777)
    for bad in ('7777', 'host:', 'host:99999', 'a b:1', '[::1]:1'):
        with pytest.raises(ValueError, match='--connect'):
            parse_address(bad, '--connect')


def test_ding_seed_actor_refuses_bad_arguments_before_any_work(tmp_path, capsys, monkeypatch):
    config = tmp_path / 'cfg.py'
    config.write_text("main_config = dict(env=dict(env_id='evil:Env'))\ncreate_config = dict()\n")
    monkeypatch.delenv(RUN_SECRET_ENV, raising=False)
    argv = ['seed-actor', '--actor-id', '1', '-c', str(config), '--connect']
    for args, message in (
        ([*argv, 'nowhere'], "--connect: expected 'HOST:PORT'"),
        ([*argv, '127.0.0.1:9'], 'no token: give --token or set $DING_RUN_SECRET'),
        ([*argv, '127.0.0.1:9', '--token', new_secret()], "env.env_id 'evil:Env' names a module to import"),
    ):
        with pytest.raises(SystemExit) as exited:
            cli_main(args)
        assert exited.value.code == 2 and message in capsys.readouterr().err
