"""C51: DQN with a categorical return distribution over fixed atoms and the projected distributional target."""

from __future__ import annotations

import torch

from ding.rl_utils.distributional import dist_nstep_td_data, dist_nstep_td_error
from ding.utils.registry import POLICY_REGISTRY

from .distributional_dqn import DistributionalDQNPolicy


@POLICY_REGISTRY.register('c51')
class C51Policy(DistributionalDQNPolicy):
    """C51 (Bellemare et al. 2017) on a ``c51dqn`` model: ``n_atom`` atoms evenly spread over ``[v_min, v_max]``
    (``policy.model`` keys, read by the loss too). The loss is the cross-entropy to the n-step target
    distribution projected on the atoms. The other keys are DQN's.
    """

    config = dict(
        type='c51',
        cuda=False,
        on_policy=False,
        priority=False,
        priority_IS_weight=False,
        discount_factor=0.97,
        nstep=1,
        model=dict(v_min=-10, v_max=10, n_atom=51),
        learn=dict(
            update_per_collect=3,
            batch_size=64,
            learning_rate=0.001,
            target_update_type='assign',
            target_update_freq=100,
            target_theta=0.005,
            ignore_done=False,
        ),
        collect=dict(n_sample=8, unroll_len=1),
        eval=dict(),
        other=dict(
            eps=dict(type='exp', start=0.95, end=0.1, decay=10000),
            replay_buffer=dict(replay_buffer_size=10000),
        ),
    )

    def default_model(self) -> tuple[str, list[str]]:
        return 'c51dqn', ['ding.model.template.distributional_q']

    def _init_learn(self) -> None:
        super()._init_learn()
        model = self._cfg.model
        self._v_min, self._v_max, self._n_atom = float(model.v_min), float(model.v_max), int(model.n_atom)

    def _distributional_loss(
        self,
        output: dict[str, torch.Tensor],
        target_output: dict[str, torch.Tensor],
        action: torch.Tensor,
        next_action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        weight: torch.Tensor | None,
        value_gamma: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        data = dist_nstep_td_data(
            output['distribution'], target_output['distribution'], action, next_action, reward, done, weight
        )
        return dist_nstep_td_error(
            data, self._gamma, self._v_min, self._v_max, self._n_atom, self._nstep, value_gamma=value_gamma
        )
