"""The inference server with real actor processes (CartPole), real shared memory and a real Unix socket.

One server and its actors serve the whole module (starting processes is the slow part); the tests run in
file order on it: batching, a killed actor and its return, a hung actor, and the server stopping last (its actors exit on their own).
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import torch

from ding.worker.async_actor.queues import StagingQueue, TrajectoryQueue
from ding.worker.seed.acting import BatchActing, QNetActing
from ding.worker.seed.assembly import TransitionAssembler
from ding.worker.seed.processes import ActorProcesses
from ding.worker.seed.server import InferenceServer
from ding.worker.seed.transport import ActorClient, SlotLayout, TransportError, new_secret
from tests.helpers.processes import child_env
from tests.helpers.wait import wait_until

ENVS = 4
# Steps per chunk: a prime, so that an actor dropped at a random moment almost surely holds a partial chunk.
UNROLL = 97
LAYOUT = SlotLayout(ENVS, (4,), 2)


class LinearQ(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(4, 2)

    def forward(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        return {'logit': self.head(obs)}


class Run:
    """A server on a temporary socket, its transitions queue, and two actor processes."""

    def __init__(self, tmp: str) -> None:
        self.model = LinearQ()
        qnet = QNetActing(self.model)
        staging = StagingQueue(1)
        staging.publish(0, qnet.actor_weights())
        self.acting = BatchActing(qnet, staging, eps=[0.0, 0.0])
        self.queue: TrajectoryQueue = TrajectoryQueue(10_000)
        self.sink = TransitionAssembler(UNROLL, LAYOUT, self.queue)
        self.secret = new_secret()
        # max_wait 1 s: on a busy machine an actor can be descheduled past a shorter wait (a half batch)
        self.server = InferenceServer(
            os.path.join(tmp, 's.sock'), self.secret, LAYOUT, 2, self.acting, self.sink, 8, 1_000_000, 1.0
        )
        self.actors = ActorProcesses(
            self.server.socket_path,
            self.secret,
            {'env_id': 'CartPole-v1'},
            2,
            ENVS,
            0,
            max_restarts=5,
            environ=child_env(),
        )

    def client(self, actor_id: int, layout: SlotLayout = LAYOUT, secret: str | None = None) -> ActorClient:
        return ActorClient(self.server.socket_path, secret or self.secret, actor_id, layout)


@pytest.fixture(scope='module')
def run(tmp_path_factory):
    run = Run(str(tmp_path_factory.mktemp('seed')))
    run.server.start()
    run.actors.start_all()
    try:
        wait_until(lambda: run.server.joined() == [0, 1], 60, what='both actors joined')
        yield run
    finally:
        run.actors.stop()
        run.server.stop()
        run.queue.close()


def test_the_forward_batches_both_actors_and_its_actions_are_the_greedy_ones(run):
    def counts() -> tuple[float, float]:
        stats = run.server.stats.snapshot()
        batches = stats['inference_batches']
        return batches, batches * stats['inference_batch_mean'] if batches else 0.0  # the mean of none is NaN

    batches, observations = counts()  # actor 0 may have run alone until actor 1 joined
    wait_until(lambda: counts()[0] >= batches + 50, 60, what='50 batches')
    more_batches, more_observations = counts()
    # max_batch 8 = both actors' 4 envs: a request waits for the other one (up to max_wait), never more than 8.
    # Unbatched, the mean would be 4; an actor stalled past max_wait on a loaded machine makes one half batch.
    assert 7.5 <= (more_observations - observations) / (more_batches - batches) <= 8.0 + 1e-9
    stats = run.server.stats.snapshot()
    assert stats['latency_us_p50'] <= stats['latency_us_p99']
    chunk = run.queue.get(timeout=30)
    assert chunk is not None and chunk.obs.shape[1:] == (4,) and len(chunk.obs) <= UNROLL * ENVS
    with torch.no_grad():
        greedy = run.model(torch.from_numpy(chunk.obs))['logit'].argmax(-1).numpy()
    assert np.array_equal(chunk.action, greedy)  # eps 0: the server's actions are the model's


def test_a_join_with_another_secret_a_wrong_layout_or_a_taken_id_is_refused(run):
    refused = run.server.stats.refused_joins
    with pytest.raises(TransportError, match='is the run secret right'):  # no answer to a wrong MAC
        run.client(0, secret=new_secret()).join()
    with pytest.raises(TransportError, match=r'n_envs 3 differs'):
        run.client(0, SlotLayout(3, (4,), 2)).join()
    with pytest.raises(TransportError, match='already connected'):
        run.client(1).join()
    with pytest.raises(TransportError, match=r'not in \[0, 2\)'):
        run.client(7).join()
    assert run.server.stats.refused_joins == refused + 4
    assert run.server.joined() == [0, 1]


def test_a_killed_actor_is_dropped_the_other_keeps_going_and_a_restarted_one_joins_again(run):
    os.kill(run.actors.pid(0), signal.SIGKILL)
    wait_until(lambda: run.server.stats.dropped_actors >= 1, 30, what='the killed actor dropped')
    assert run.server.joined() == [1]
    before = run.sink.env_steps
    wait_until(lambda: run.sink.env_steps > before, 30, what='actor 1 still served')
    assert run.actors.restart_dead() == [0]
    wait_until(lambda: run.server.joined() == [0, 1], 60, what='actor 0 joined again')


def test_a_hung_actor_is_dropped_and_exits_once_it_wakes(run):
    pid = run.actors.pid(1)
    dropped = run.server.stats.dropped_actors
    os.kill(pid, signal.SIGSTOP)
    try:
        # the server thread counts the hung actor, then drops it: wait for both
        wait_until(
            lambda: run.server.stats.hung_actors >= 1 and run.server.stats.dropped_actors == dropped + 1,
            30,
            what='actor 1 dropped as hung (timeout 1 s)',
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    assert run.sink.discarded_chunks >= 1  # the partial chunks of the killed and the hung actor (1 in 97 each: none)
    wait_until(lambda: run.actors.exit_code(1) is not None, 30, what='the woken actor exited (its socket closed)')
    assert run.actors.exit_code(1) == 0


def test_stopping_the_server_makes_every_actor_exit_cleanly(run):
    run.server.stop()
    assert not run.server.is_alive()
    wait_until(lambda: run.actors.exit_code(0) is not None, 30, what='actor 0 exited')
    assert run.actors.exit_code(0) == 0
    assert not os.path.exists(run.server.socket_path)
