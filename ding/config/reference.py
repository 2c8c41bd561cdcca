"""The per-component config reference in ``docs/config.md``, generated from the code's defaults.

``python -m ding.config.reference`` prints the markdown; a test checks that the doc holds exactly
this text, so the reference cannot drift from ``default_config()``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

from ding.utils.registry import REGISTRIES

BEGIN = '<!-- BEGIN GENERATED COMPONENT DEFAULTS (python -m ding.config.reference) -->'
END = '<!-- END GENERATED COMPONENT DEFAULTS -->'

# (title, where it lands in the compiled config, registry name, type, module to import)
COMPONENTS: list[tuple[str, str, str, str, str]] = [
    ('DQN policy', 'policy', 'policy', 'dqn', 'ding.policy'),
    ('PPO policy', 'policy', 'policy', 'ppo', 'ding.policy'),
    ('A2C policy', 'policy', 'policy', 'a2c', 'ding.policy'),
    ('BaseLearner', 'policy.learn.learner', 'learner', 'base', 'ding.worker.learner'),
    ('SampleSerialCollector', 'policy.collect.collector', 'serial_collector', 'sample', 'ding.worker.collector'),
    ('EpisodeSerialCollector', 'policy.collect.collector', 'serial_collector', 'episode', 'ding.worker.collector'),
    ('InteractionSerialEvaluator', 'policy.eval.evaluator', 'serial_evaluator', 'interaction', 'ding.worker.collector'),
    ('Naive (FIFO) replay buffer', 'policy.other.replay_buffer', 'buffer', 'naive', 'ding.worker.replay_buffer'),
    (
        'Advanced (prioritized) replay buffer',
        'policy.other.replay_buffer',
        'buffer',
        'advanced',
        'ding.worker.replay_buffer',
    ),
    ('BaseSerialCommander', 'policy.other.commander', 'commander', 'base', 'ding.worker.coordinator'),
    ('Base env manager', 'env.manager', 'env_manager', 'base', 'ding.envs'),
    ('Subprocess env manager', 'env.manager', 'env_manager', 'subprocess', 'ding.envs'),
    ('As-ready subprocess env manager', 'env.manager', 'env_manager', 'async_subprocess', 'ding.envs'),
    ('Generic gymnasium env', 'env', 'env', 'gymnasium', 'ding.envs'),
]


def _flatten(d: Any, prefix: str = '') -> Iterator[tuple[str, Any]]:
    for key, value in d.items():
        if key == 'cfg_type':
            continue
        path = f'{prefix}{key}'
        if isinstance(value, dict) and value:
            yield from _flatten(value, path + '.')
        else:
            yield path, value


def _fmt(value: Any) -> str:
    text = repr(value)
    return text.replace('|', '\\|')


def generate() -> str:
    parts = [BEGIN, '']
    for title, where, registry, type_name, module in COMPONENTS:
        importlib.import_module(module)
        cls = REGISTRIES[registry].get_cls(type_name)
        parts.append(f'### {title} (`{where}`, type `{type_name}`)')
        parts.append('')
        parts.append('| key | default |')
        parts.append('|---|---|')
        for key, value in _flatten(cls.default_config()):
            parts.append(f'| `{key}` | `{_fmt(value)}` |')
        parts.append('')
    parts.append(END)
    return '\n'.join(parts)


if __name__ == '__main__':
    print(generate())
