"""Acting on the learner side with a recurrent model: the state ``BatchActing`` keeps per actor env, whatever the
batches the server forms, equals running each env alone step by step; the unrolls carry the state the learner
re-runs from."""

from __future__ import annotations

import numpy as np
import torch

from ding.policy import IMPALAPolicy
from ding.worker.async_actor.queues import StagingQueue, TrajectoryQueue
from ding.worker.seed.acting import BatchActing
from ding.worker.seed.assembly import UnrollAssembler
from ding.worker.seed.transport import SlotLayout

N_ENVS = 2
LAYOUT = SlotLayout(N_ENVS, (2,), 2)
# The actors of each request batch, in the order the server joined them (a dropped actor leaves a gap).
BATCHES = [[0, 1], [1, 0], [0], [1], [0, 1], [1], [0], [0, 1], [1, 0], [0, 1]]


class LoneEnvs:
    """The reference: every actor env acted for alone, one observation at a time, with its own state."""

    def __init__(self, policy: IMPALAPolicy) -> None:
        self.policy = policy
        self.model = policy.actor_model()
        self.model.load_state_dict(policy.actor_weights())
        self.states: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def state(self, actor_id: int, env: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.states.get((actor_id, env)) or self.policy.initial_actor_state(1)

    def step(self, actor_id: int, obs: np.ndarray, first: np.ndarray) -> np.ndarray:
        logits = []
        for env in range(len(obs)):
            _, logit, self.states[actor_id, env] = self.policy.actor_step(
                self.model,
                torch.from_numpy(obs[env : env + 1]),
                self.state(actor_id, env),
                torch.tensor(first[env : env + 1]),
            )
            logits.append(logit[0].numpy())
        return np.stack(logits)

    def forget(self, actor_id: int) -> None:
        for env in range(N_ENVS):
            self.states.pop((actor_id, env), None)


def _joined_state(lone: LoneEnvs, actor_id: int) -> tuple[torch.Tensor, ...]:
    rows = [lone.state(actor_id, env) for env in range(N_ENVS)]
    return tuple(torch.cat([r[i] for r in rows]) for i in range(2))


def test_the_state_kept_per_actor_env_equals_acting_for_each_env_alone():
    torch.manual_seed(0)
    model = dict(obs_shape=2, action_shape=2, encoder_hidden_size_list=[32], lstm_hidden_size=8)
    policy = IMPALAPolicy(dict(type='impala', model=model), enable_field=['collect'])  # acting needs no optimizer
    staging = StagingQueue(1)
    staging.publish(0, policy.actor_weights())
    acting, lone = BatchActing(policy, staging), LoneEnvs(policy)
    unrolls: TrajectoryQueue = TrajectoryQueue(32)
    assembler = UnrollAssembler(3, LAYOUT, unrolls, acting.state_before)
    rng = np.random.default_rng(0)
    ended = {0: np.ones(N_ENVS, dtype=bool), 1: np.ones(N_ENVS, dtype=bool)}  # what the server tracks per actor
    for actor_id in (0, 1):
        assembler.join(actor_id)
    for i, batch in enumerate(BATCHES):
        if i == 6:  # actor 1 is dropped and joins again: it starts from the initial state
            assembler.drop(1)
            acting.forget(1)
            lone.forget(1)
            assembler.join(1)
            ended[1] = np.ones(N_ENVS, dtype=bool)
        obs = rng.normal(size=(len(batch) * N_ENVS, 2)).astype(np.float32)
        first = np.concatenate([ended[a] for a in batch])
        before = {a: _joined_state(lone, a) for a in batch}
        action, logit, version = acting.act(obs, first, [(a, N_ENVS) for a in batch])
        for j, actor_id in enumerate(batch):
            rows = slice(j * N_ENVS, (j + 1) * N_ENVS)
            expected = lone.step(actor_id, obs[rows], first[rows])
            np.testing.assert_allclose(logit[rows], expected, rtol=1e-5, atol=1e-6)
            for kept, reference in zip(acting.state_before(actor_id), before[actor_id]):
                np.testing.assert_allclose(kept.numpy(), reference.numpy(), rtol=1e-5, atol=1e-6)
            terminated = rng.random(N_ENVS) < 0.3
            no_end = np.zeros(N_ENVS, dtype=bool)
            reward = np.ones(N_ENVS, dtype=np.float32)
            assembler.record(
                actor_id, obs[rows], first[rows], reward, (terminated, no_end), action[rows], logit[rows], version
            )
            ended[actor_id] = terminated

    # Every unroll starts from the state its first observation was acted on with, so the learner's re-run from
    # it reproduces the behaviour logits (what V-trace compares against).
    assert unrolls.qsize() >= 3 and assembler.discarded_chunks == 1
    model = policy.actor_model()
    model.load_state_dict(policy.actor_weights())
    nonzero = 0
    for unroll in unrolls.drain():
        t = unroll.tensors
        nonzero += int(unroll.initial_state[0].abs().sum() > 0)
        with torch.no_grad():
            logit, _, final = model.unroll(t['obs'][:-1], unroll.initial_state, t['first'][:-1])
        np.testing.assert_allclose(logit.numpy(), t['logit'].numpy(), rtol=1e-5, atol=1e-6)
        for replayed, kept in zip(final, unroll.final_state):
            np.testing.assert_allclose(replayed.numpy(), kept.numpy(), rtol=1e-5, atol=1e-6)
    assert nonzero  # some unroll started mid-episode
