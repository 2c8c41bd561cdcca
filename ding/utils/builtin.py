"""Importing every built-in component of ``ding`` so the registries list them (``ding -q``).

``ding`` names only its own modules (it never imports ``dizoo``). Other installed packages add theirs
through the ``ding.components`` entry-point group (``dizoo`` declares its environments there in setup.py),
so ``ding -q env`` lists every environment installed, whoever ships it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from importlib.metadata import entry_points

PLUGIN_GROUP = 'ding.components'

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
    """Import :data:`BUILTIN_MODULES` (an optional part that is not installed is skipped), the modules of
    installed packages' ``ding.components`` entry points, then ``extra_modules`` (which must import)."""
    for name in BUILTIN_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:  # an optional part that is not installed
            if not name.startswith(getattr(exc, 'name', '') or '\0'):
                raise
    for name in [ep.module for ep in entry_points(group=PLUGIN_GROUP)] + list(extra_modules):
        importlib.import_module(name)
