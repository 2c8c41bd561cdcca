"""Importing every built-in component of ``ding`` so the registries list them (``ding -q``).

Only ``ding``'s own modules: ``ding`` never imports ``dizoo``. The environments of ``dizoo`` (or of any
other package) register when a config's ``import_names`` or the user's code imports them; pass their
modules as ``extra_modules`` to list them too.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

BUILTIN_MODULES = (
    'ding.worker.learner',
    'ding.worker.learner.comm',
    'ding.worker.collector',
    'ding.worker.collector.zergling_parallel_collector',
    'ding.worker.collector.comm',
    'ding.worker.coordinator',
    'ding.worker.coordinator.coordinator',
    'ding.worker.coordinator.solo_parallel_commander',
    'ding.worker.coordinator.naive_parallel_commander',
    'ding.worker.replay_buffer',
    'ding.policy',
    'ding.model',
    'ding.envs',
)


def import_builtin_components(extra_modules: Iterable[str] = ()) -> None:
    """Import :data:`BUILTIN_MODULES` (an optional part that is not installed is skipped), then
    ``extra_modules`` (which must import)."""
    for name in BUILTIN_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:  # an optional part that is not installed
            if not name.startswith(getattr(exc, 'name', '') or '\0'):
                raise
    for name in extra_modules:
        importlib.import_module(name)
