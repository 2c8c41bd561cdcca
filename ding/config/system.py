"""Checking the ``system`` section of a parallel config before any process is started.

The section names the coordinator's settings and every worker's entry; a typo or a wrong value there used to
surface only once the workers ran (a traceback in the coordinator, or a learner refusing every task it was
given). ``check_system_config`` holds it to the same rules as the main config: every key known (with a
"did you mean"), of its default's type, and within the bounds of ``SYSTEM_BOUNDS``; the files of ``system.tls``
are checked too (``ding.utils.tls``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from ding.utils.tls import TLS_KEYS, tls_problems

from .bounds import COORDINATOR_ADDRESS_KEYS, SYSTEM_BOUNDS, SYSTEM_KEYS, SYSTEM_TYPES, WORKER_ENTRY_KEYS
from .validate import coerce_integers, raise_problems, validate_section

WORKER_KINDS = ('learner', 'collector')


def system_defaults(
    coordinator_defaults: Mapping[str, Any],
    comm_defaults: Mapping[str, Mapping[str, Any]],
    worker_names: Mapping[str, Sequence[str]],
) -> dict[str, Any]:
    """The tree of every key a system section may hold, with its default.

    ``coordinator_defaults``: the coordinator class's config; ``comm_defaults``: the comm learner's and the comm
    collector's config by kind (``'learner'``, ``'collector'``); ``worker_names``: the entries the run has
    (``learner0``, ...), by kind. The entries of a comm worker without defaults are free-form.
    """
    tree = copy.deepcopy(SYSTEM_KEYS)
    coordinator = {k: v for k, v in coordinator_defaults.items() if k != 'cfg_type'}
    tree['coordinator'] = {**copy.deepcopy(COORDINATOR_ADDRESS_KEYS), **copy.deepcopy(coordinator)}
    for kind in WORKER_KINDS:
        entry = {k: v for k, v in (comm_defaults.get(kind) or {}).items() if k != 'cfg_type'}
        # A comm worker that declares no defaults says nothing about its keys: its entries stay free-form.
        entry = {**copy.deepcopy(WORKER_ENTRY_KEYS), **copy.deepcopy(entry)} if entry else {}
        tree[kind] = {name: copy.deepcopy(entry) for name in worker_names.get(kind, ())}
    return tree


def check_system_config(
    system: MutableMapping[str, Any],
    coordinator_defaults: Mapping[str, Any],
    comm_defaults: Mapping[str, Mapping[str, Any]],
    worker_names: Mapping[str, Sequence[str]],
    allow_unknown_keys: bool = False,
) -> None:
    """Raise ``ConfigError`` listing every problem of the user's ``system`` section (see ``system_defaults``);
    ``allow_unknown_keys`` accepts keys the defaults do not know. When it is fine, integral floats where an int
    is expected (``comm_batches=2.0``) become ints in place, as the workers check for ints."""
    problems: list[str] = []
    defaults = system_defaults(coordinator_defaults, comm_defaults, worker_names)
    validate_section(system, defaults, 'system', SYSTEM_BOUNDS, problems, allow_unknown_keys)
    for key, (types, want) in SYSTEM_TYPES.items():
        value = system.get(key)
        if value is not None and not isinstance(value, types):
            problems.append(f'system.{key}: expected {want}, got {type(value).__name__} {value!r}')
    # TLS files: present, readable, the key private, the certificate matching its key (before any port is taken).
    # (Unknown keys and a non-dict section were reported above, with "did you mean".)
    tls = system.get('tls')
    if isinstance(tls, Mapping):
        problems.extend(tls_problems({k: v for k, v in tls.items() if k in TLS_KEYS}, 'system.tls'))
    for kind in WORKER_KINDS:
        for name, entry in (system.get(kind) or {}).items():
            if isinstance(entry, Mapping) and entry.get('use_distributed'):
                problems.append(f'system.{kind}.{name}.use_distributed: True is not supported by the comm {kind}')
    raise_problems(problems)
    coerce_integers(system, defaults, 'system', SYSTEM_BOUNDS)
