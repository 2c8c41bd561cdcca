"""The steps before a parallel run: choose the checkpoint to resume from, compile the config, check it.

Compiling needs every component's default config, and the policy, learner and collector classes that
hold them import torch; checking a checkpoint reads it with torch too. The coordinator process needs
neither afterwards. So, when torch is not loaded in this process yet, ``prepare_run`` does these steps
in a short-lived child interpreter (``python -m ding.entry.parallel_prepare REQUEST ANSWER``) and the
coordinator process never imports torch: about 220 MB resident less for the whole run, for the same
start-up time (the child imports torch instead of this process). When torch is already here (a test, a
script that trained before), the steps run in this process: there is nothing to save.

Request and answer are JSON files (config data only; nothing is unpickled), mode 0600 in a private
temporary directory: they hold the whole config, a configured token included. Config errors raised in the
child are raised here again as the same :class:`ConfigError` / :class:`ResumeError` with the same message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

from easydict import EasyDict

from ding.config.errors import ConfigError
from ding.config.parallel import compile_config_parallel
from ding.utils.jsonable import to_jsonable
from ding.worker.resume_choice import ResumeError, experiment_ckpt_dir, resolve_resume

from .lifeline import die_with_launcher, launcher_env


def child_env() -> dict[str, str]:
    """Environment of a ding child process: this very ding (and dizoo) importable even when not installed,
    and this process named as its launcher, which it dies with (``ding.entry.lifeline.die_with_launcher``)."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env['PYTHONPATH'] = root + (os.pathsep + env['PYTHONPATH'] if env.get('PYTHONPATH') else '')
    return launcher_env(env)


def prepare_run(
    main_cfg: EasyDict,
    create_cfg: EasyDict,
    system_cfg: EasyDict,
    seed: int,
    resume: str | None,
    answer_in: Callable[[str, str], bool] | None = None,
) -> tuple[EasyDict, str | None]:
    """Resolve ``resume`` (see ``ding.worker.resume.resolve_resume``), compile the parallel config (written
    to ``./{exp_name}/total_config.py``) and check its policy transport. Returns ``(compiled config,
    checkpoint path or None)``. In a child interpreter unless torch is loaded here already (module doc):
    ``answer_in(request, answer)``, when given, has another process that imported torch already (a warm
    worker) answer the request, and returns False if it could not (then a child of its own does)."""
    if 'torch' in sys.modules:
        return prepare_here(main_cfg, create_cfg, system_cfg, seed, resume)
    return _prepare_in_child(main_cfg, create_cfg, system_cfg, seed, resume, answer_in)


def prepare_here(
    main_cfg: EasyDict, create_cfg: EasyDict, system_cfg: EasyDict, seed: int, resume: str | None
) -> tuple[EasyDict, str | None]:
    """``prepare_run`` in this process (imports torch)."""
    main_cfg = EasyDict(main_cfg)
    main_cfg.setdefault('exp_name', 'default_experiment')
    # Before anything is built or written: a checkpoint that does not verify stops the run here.
    resume_path = resolve_resume(main_cfg, resume, ckpt_dir=experiment_ckpt_dir(main_cfg.exp_name, 'learner0'))
    main_cfg.pop('resume', None)
    cfg = compile_config_parallel(main_cfg, create_cfg, system_cfg, seed=seed, save_cfg=True)
    check_policy_transport(cfg)
    return cfg, resume_path


def check_policy_transport(cfg: EasyDict) -> None:
    """``policy_transport='http'`` needs the learner's run service (or an explicit ``weights_address``)."""
    from ding.service.weights import check_policy_transport as check_transport  # deferred: ding.service imports torch

    collector_cfg = cfg.main.policy.collect.collector
    try:
        transport = check_transport(
            collector_cfg.get('policy_transport', 'fs'), 'policy.collect.collector.policy_transport'
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if transport != 'http' or collector_cfg.get('weights_address'):
        return
    if not (cfg.main.get('service') or {}).get('enable'):
        raise ConfigError(
            "policy.collect.collector.policy_transport='http' needs the learner's weights server: "
            'set service=dict(enable=True) (or policy.collect.collector.weights_address)'
        )


# ---- the child interpreter ---------------------------------------------------------------------------
def _errors() -> dict[str, type]:
    """Exceptions a child's answer may name; they are raised here again with their message."""
    return {'ConfigError': ConfigError, 'ResumeError': ResumeError}


def _prepare_in_child(
    main_cfg: EasyDict,
    create_cfg: EasyDict,
    system_cfg: EasyDict,
    seed: int,
    resume: str | None,
    answer_in: Callable[[str, str], bool] | None = None,
) -> tuple[EasyDict, str | None]:
    with tempfile.TemporaryDirectory(prefix='ding_prepare_') as tmp:
        request, answer = os.path.join(tmp, 'request.json'), os.path.join(tmp, 'answer.json')
        _write_private_json(
            request,
            {
                'main': to_jsonable(main_cfg),
                'create': to_jsonable(create_cfg),
                'system': to_jsonable(system_cfg),
                'seed': seed,
                'resume': None if resume is None else os.fspath(resume),
            },
        )
        code: Any = 'none: answered by a warm worker'
        if answer_in is None or not answer_in(request, answer):
            code = subprocess.run(
                [sys.executable, '-m', 'ding.entry.parallel_prepare', request, answer],
                stdin=subprocess.DEVNULL,
                env=child_env(),
            ).returncode
        try:
            with open(answer, encoding='utf-8') as f:
                result = json.load(f)
        except (OSError, ValueError):
            raise RuntimeError(
                f'compiling the parallel config in a child process failed (exit code {code}, '
                f'no answer; its output is above)'
            ) from None
    error = result.get('error')
    if error:
        cls = _errors().get(error.get('type'))
        if cls is not None:
            raise cls(error['message'])
        raise RuntimeError(
            f'compiling the parallel config failed in a child process: {error["type"]}: '
            f'{error["message"]}\n{error.get("traceback", "")}'
        )
    return EasyDict(result['cfg']), result.get('resume_path')


def main(argv: list[str] | None = None) -> int:
    """Child entry point: ``REQUEST`` (JSON main/create/system/seed/resume) -> ``ANSWER`` (JSON cfg and
    resume_path, or the error)."""
    die_with_launcher()  # a killed pipeline leaves no compile child behind
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print('usage: python -m ding.entry.parallel_prepare REQUEST.json ANSWER.json', file=sys.stderr)
        return 2
    return answer_request(*args)


def answer_request(request_path: str, answer_path: str) -> int:
    """Answer one request file (see ``main``): 0 when the config compiled, 1 when the answer is an error."""
    with open(request_path, encoding='utf-8') as f:
        request = json.load(f)
    try:
        cfg, resume_path = prepare_here(
            EasyDict(request['main']),
            EasyDict(request['create']),
            EasyDict(request['system']),
            int(request['seed']),
            request.get('resume'),
        )
        answer: dict[str, Any] = {'cfg': to_jsonable(cfg), 'resume_path': resume_path}
        code = 0
    except Exception as exc:  # the parent raises it again; the traceback helps with unexpected ones
        kind = next((name for name, cls in _errors().items() if type(exc) is cls), None) or next(
            (name for name, cls in _errors().items() if isinstance(exc, cls)), type(exc).__name__
        )
        answer = {'error': {'type': kind, 'message': str(exc), 'traceback': traceback.format_exc()}}
        code = 1
    tmp = f'{answer_path}.tmp'
    _write_private_json(tmp, answer)
    os.replace(tmp, answer_path)
    return code


def _write_private_json(path: str, data: Any) -> None:
    """Request and answer hold the whole config, a configured token included: readable by the owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w', encoding='utf-8') as f:
        json.dump(data, f)


if __name__ == '__main__':
    sys.exit(main())
