"""Importing every built-in component so the registries list them (``ding -q``)."""

import importlib

BUILTIN_MODULES = (
    'ding.worker.learner',
    'ding.worker.learner.comm',
    'ding.worker.collector',
    'ding.worker.collector.zergling_parallel_collector',
    'ding.worker.collector.comm',
    'ding.worker.coordinator',
    'ding.worker.coordinator.solo_parallel_commander',
    'ding.worker.coordinator.naive_parallel_commander',
    'ding.worker.replay_buffer',
    'ding.policy',
    'ding.model',
    'ding.envs',
    'dizoo.classic_control.cartpole.envs.cartpole_env',
    'dizoo.classic_control.pendulum.envs.pendulum_env',
)


def import_builtin_components() -> None:
    for name in BUILTIN_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:  # an optional part that is not installed
            if not name.startswith(getattr(exc, 'name', '') or '\0'):
                raise
