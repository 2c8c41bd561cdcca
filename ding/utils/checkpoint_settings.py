"""``policy.learn.learner.checkpoint``: where and how often a learner stores checkpoints beyond its hooks.

The defaults (``CHECKPOINT_DEFAULTS``) change nothing: no ``ckpt_uri`` keeps checkpoints in
``./{exp_name}/ckpt`` only, and no cadence adds no checkpoint. ``checkpoint_problems`` says what is wrong
with a section (the config check reports it before any work starts); ``CheckpointSettings.from_config``
builds the settings the learner uses.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .object_store import missing_extra, uri_problem

CHECKPOINT_DEFAULTS: dict[str, Any] = dict(
    # None: checkpoints stay in ./{exp_name}/ckpt; a local path or an s3:// / gs:// URL: also stored there
    ckpt_uri=None,
    # a checkpoint every N env steps and/or every M minutes (None: only the hooks' checkpoints)
    every_env_steps=None,
    every_minutes=None,
    # periodic checkpoints kept at ckpt_uri (and in the local directory when a cadence is set), plus the best
    keep_n=5,
    keep_best=True,
    # None or 'zstd' (the stored shards; the local files stay plain safetensors)
    compression=None,
    compression_level=3,
    shard_mb=64,
    # attempts after the first before the checkpoint counts as stalled; the wait doubles from retry_seconds
    upload_retries=5,
    retry_seconds=1.0,
    # while uploads keep failing: 'continue' training (and report checkpoint_stalled) or 'pause' until they work
    on_stall='continue',
    max_parallel=4,
    # how long closing the learner waits for checkpoints still being uploaded
    flush_seconds=60.0,
    # fsspec options of the filesystem (e.g. endpoint_url for an S3-compatible server); never logged
    storage_options=dict(),
)
COMPRESSIONS = (None, 'zstd')
ON_STALL = ('continue', 'pause')
SECTION = 'policy.learn.learner.checkpoint'


def checkpoint_problems(section: Mapping[str, Any] | None, path: str = SECTION) -> list[str]:
    """What is wrong with a checkpoint section beyond its bounds (an unusable URI, a missing extra)."""
    if not isinstance(section, Mapping):
        return [] if section is None else [f'{path}: expected a dict (section), got {section!r}']
    problems = []
    uri = section.get('ckpt_uri')
    if uri is not None:
        problem = uri_problem(uri)
        if problem is None:
            problem = missing_extra(uri)
        if problem:
            problems.append(f'{path}.ckpt_uri: {problem}')
    if section.get('compression') == 'zstd' and importlib.util.find_spec('zstandard') is None:
        problems.append(f'{path}.compression: \'zstd\' needs zstandard: pip install "ding[zstd]"')
    options = section.get('storage_options')
    if options is not None and not isinstance(options, Mapping):
        problems.append(f'{path}.storage_options: expected a dict of fsspec options, got {type(options).__name__}')
    return problems


@dataclass(frozen=True)
class CheckpointSettings:
    ckpt_uri: str | None = None
    every_env_steps: int | None = None
    every_minutes: float | None = None
    keep_n: int = 5
    keep_best: bool = True
    compression: str | None = None
    compression_level: int = 3
    shard_mb: float = 64
    upload_retries: int = 5
    retry_seconds: float = 1.0
    on_stall: str = 'continue'
    max_parallel: int = 4
    flush_seconds: float = 60.0
    storage_options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None) -> CheckpointSettings:
        """Settings from a (validated) section; missing keys take ``CHECKPOINT_DEFAULTS``."""
        merged = dict(CHECKPOINT_DEFAULTS)
        merged.update({k: v for k, v in (section or {}).items() if k in CHECKPOINT_DEFAULTS})
        problems = checkpoint_problems(merged) + _bound_problems(merged)
        if problems:
            raise ValueError('; '.join(problems))
        merged['storage_options'] = dict(merged['storage_options'] or {})
        return cls(**merged)

    def for_instance(self, instance_name: str) -> CheckpointSettings:
        """These settings for the learner named ``instance_name``: the default learner ('learner') stores at
        ``ckpt_uri``, any other (parallel mode's learner0, learner1, ...) at ``ckpt_uri/{instance_name}``, as its
        local directory is ``ckpt_{instance_name}``: learners of one run never share a MANIFEST.json."""
        if self.ckpt_uri is None or instance_name == 'learner':
            return self
        return dataclasses.replace(self, ckpt_uri=f'{self.ckpt_uri.rstrip("/")}/{instance_name}')

    @property
    def cadence(self) -> bool:
        return self.every_env_steps is not None or self.every_minutes is not None

    @property
    def shard_bytes(self) -> int:
        return max(int(self.shard_mb * 1024 * 1024), 1)


def _bound_problems(s: Mapping[str, Any]) -> list[str]:
    # The config check reports these with the other bounds (ding.config.bounds); a learner built from a
    # hand-written dict gets the same rules here.
    out = []

    def need(key: str, ok: bool, what: str) -> None:
        if not ok:
            out.append(f'{SECTION}.{key} = {s[key]!r}: must be {what}')

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    def is_num(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    need('every_env_steps', s['every_env_steps'] is None or (is_int(s['every_env_steps']) and s['every_env_steps'] >= 1), 'None or an int >= 1')  # fmt: skip
    need('every_minutes', s['every_minutes'] is None or (is_num(s['every_minutes']) and s['every_minutes'] > 0), 'None or a number > 0')  # fmt: skip
    need('keep_n', is_int(s['keep_n']) and s['keep_n'] >= 1, 'an int >= 1')
    need('keep_best', isinstance(s['keep_best'], bool), 'True or False')
    need('compression', s['compression'] in COMPRESSIONS, f'one of {list(COMPRESSIONS)}')
    need('compression_level', is_int(s['compression_level']) and 1 <= s['compression_level'] <= 22, 'an int in [1, 22]')  # fmt: skip
    need('shard_mb', is_num(s['shard_mb']) and 0 < s['shard_mb'] <= 4096, 'a number in (0, 4096]')
    need('upload_retries', is_int(s['upload_retries']) and 0 <= s['upload_retries'] <= 100, 'an int in [0, 100]')
    need('retry_seconds', is_num(s['retry_seconds']) and 0 < s['retry_seconds'] <= 600, 'a number in (0, 600]')
    need('on_stall', s['on_stall'] in ON_STALL, f'one of {list(ON_STALL)}')
    need('max_parallel', is_int(s['max_parallel']) and 1 <= s['max_parallel'] <= 64, 'an int in [1, 64]')
    need('flush_seconds', is_num(s['flush_seconds']) and s['flush_seconds'] >= 0, 'a number >= 0')
    return out


__all__ = ['CHECKPOINT_DEFAULTS', 'CheckpointSettings', 'checkpoint_problems', 'COMPRESSIONS', 'ON_STALL']
