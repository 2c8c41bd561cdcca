"""DQN command policies whose learn (or collect) mode refuses its config, as a policy that checks more than the
config layer can: the learner (or collector) refuses its task for a config reason (for the tests of such a refusal
ending a parallel run)."""

from ding.config.errors import ConfigError
from ding.policy.command_mode_policy_instance import DQNCommandModePolicy
from ding.utils.registry import POLICY_REGISTRY

REFUSAL = 'policy.learn.refusal_demo: this test policy refuses every learner config'


@POLICY_REGISTRY.register('refusing_dqn_command')
class RefusingDQNCommandPolicy(DQNCommandModePolicy):
    def _init_learn(self) -> None:
        raise ConfigError(REFUSAL)


COLLECT_REFUSAL = 'policy.collect.refusal_demo: this test policy refuses every collector config'


@POLICY_REGISTRY.register('refusing_collect_dqn_command')
class RefusingCollectDQNCommandPolicy(DQNCommandModePolicy):
    """Learns like DQN; its collect mode refuses the config (the collector refuses its task for a config reason)."""

    def _init_collect(self) -> None:
        raise ConfigError(COLLECT_REFUSAL)
