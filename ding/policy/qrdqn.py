"""QR-DQN: DQN with a quantile return distribution trained by the quantile Huber loss."""

from __future__ import annotations

import torch

from ding.rl_utils.distributional import qrdqn_nstep_td_data, qrdqn_nstep_td_error
from ding.utils.registry import POLICY_REGISTRY

from .distributional_dqn import DistributionalDQNPolicy


@POLICY_REGISTRY.register('qrdqn')
class QRDQNPolicy(DistributionalDQNPolicy):
    """QR-DQN (Dabney et al. 2018) on a ``qrdqn`` model of ``model.num_quantiles`` quantiles. The loss is the
    quantile Huber loss (threshold ``learn.kappa``; 0: the plain quantile loss) against the n-step target
    quantiles. The other keys are DQN's.
    """

    config = dict(
        type='qrdqn',
        cuda=False,
        on_policy=False,
        priority=False,
        priority_IS_weight=False,
        discount_factor=0.97,
        nstep=1,
        model=dict(num_quantiles=32),
        learn=dict(
            update_per_collect=3,
            batch_size=64,
            learning_rate=0.001,
            target_update_type='assign',
            target_update_freq=100,
            target_theta=0.005,
            ignore_done=False,
            kappa=1.0,
        ),
        collect=dict(n_sample=8, unroll_len=1),
        eval=dict(),
        other=dict(
            eps=dict(type='exp', start=0.95, end=0.1, decay=10000),
            replay_buffer=dict(replay_buffer_size=10000),
        ),
    )

    def default_model(self) -> tuple[str, list[str]]:
        return 'qrdqn', ['ding.model.template.distributional_q']

    def _init_learn(self) -> None:
        super()._init_learn()
        self._kappa = float(self._cfg.learn.kappa)
        if self._kappa < 0:
            raise ValueError(f'QRDQNPolicy: policy.learn.kappa must be >= 0, got {self._kappa}')

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
        data = qrdqn_nstep_td_data(
            output['q'], target_output['q'], action, next_action, reward, done, output['tau'], weight
        )
        return qrdqn_nstep_td_error(data, self._gamma, self._nstep, value_gamma=value_gamma, kappa=self._kappa)
