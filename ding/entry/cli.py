"""The ``ding`` command: ``ding -m serial -c cfg.py -s 0``; ``ding ctl ...`` controls a running training."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

from ding import __version__
from ding.config import ConfigError, read_config
from ding.utils.atomic_file import StorageError
from ding.utils.builtin import import_builtin_components
from ding.utils.registry import REGISTRIES

from .ctl import main as ctl_main
from .startup import limit_openmp_threads

MODES = ('serial', 'serial_onpolicy', 'eval', 'parallel', 'async', 'seed')


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='ding',
        description='Train and evaluate reinforcement-learning agents.',
        epilog='example: ding -m serial -c dizoo/classic_control/cartpole/config/cartpole_dqn_config.py -s 0\n'
        'control a running training: ding ctl {status,pause,resume,tune,terminate} --exp-dir ./EXP_NAME',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument('-m', '--mode', choices=MODES, help='which pipeline to run')
    p.add_argument('-c', '--config', help='config file (.py defining main_config/create_config, or .yaml)')
    p.add_argument(
        '-s',
        '--seed',
        type=int,
        action='append',
        help='random seed; repeat (-s 0 -s 1) for one run per seed (default 0)',
    )
    p.add_argument('--exp-name', help='override exp_name (the output directory ./EXP_NAME/)')
    p.add_argument('--train-iter', type=int, default=int(1e10), help='stop after this many train iterations')
    p.add_argument('--env-step', type=int, default=int(1e10), help='stop after this many env steps')
    p.add_argument('--load-path', help='checkpoint to evaluate (-m eval)')
    p.add_argument(
        '--resume',
        metavar='auto|never|PATH',
        help="continue a run from a checkpoint: 'auto' = the newest valid one of ./EXP_NAME/ckpt/ "
        "(fresh start if none), 'never' = start fresh, or a checkpoint path "
        "(default: the config's top-level 'resume' key, else 'never')",
    )
    p.add_argument('-v', '--version', action='version', version=f'ding {__version__}')
    p.add_argument(
        '-q',
        '--query-registry',
        metavar='REGISTRY',
        help="list what is registered in REGISTRY (e.g. policy, env, buffer; 'all' for every one)",
    )
    return p


def _fail(msg: str, code: int = 2) -> int:
    print(f'ding: error: {msg}', file=sys.stderr)
    return code


def _exp_name_for_seed(exp_name: str, seed: int, n_seeds: int) -> str:
    if re.search(r'_seed\d+$', exp_name):
        return re.sub(r'_seed\d+$', f'_seed{seed}', exp_name)
    return f'{exp_name}_seed{seed}' if n_seeds > 1 else exp_name


def _query(name: str) -> int:
    import_builtin_components()
    names = sorted(REGISTRIES) if name == 'all' else [name]
    for n in names:
        if n not in REGISTRIES:
            return _fail(f"unknown registry '{n}'; known registries: {sorted(REGISTRIES)}")
        print(f'{n}: ' + ', '.join(REGISTRIES[n].query()))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == 'ctl':  # `ding ctl status|pause|resume|tune|terminate ...` (ding.entry.ctl)
        return ctl_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.query_registry:
        return _query(args.query_registry)
    if not args.mode:
        return _fail('choose a mode with -m {' + ','.join(MODES) + '}')
    if not args.config:
        return _fail('a config file is needed: -c FILE')
    if not os.path.isfile(args.config):
        return _fail(f"config file '{args.config}' not found")

    try:
        main_cfg, create_cfg, system_cfg = read_config(args.config)
    except ConfigError as exc:
        return _fail(str(exc))

    seeds = args.seed or [0]
    if args.resume is not None:
        if args.mode == 'eval':
            return _fail('--resume applies to training modes; -m eval takes --load-path')
        if len(seeds) > 1 and args.resume not in ('auto', 'never'):
            return _fail('--resume PATH continues one run; with several seeds use --resume auto')
    for seed in seeds:
        cfg = main_cfg
        exp_name = args.exp_name or cfg.get('exp_name', 'default_experiment')
        cfg.exp_name = _exp_name_for_seed(exp_name, seed, len(seeds))
        started = time.time()
        try:
            code = _run_one(args, cfg, create_cfg, system_cfg, seed)
        except ConfigError as exc:
            return _fail(str(exc))
        except StorageError as exc:  # a file the disk refused: one line naming it and what exists, not a traceback
            return _fail(f'{exc}; {checkpoint_summary(cfg.exp_name, started)}', 1)
        except KeyboardInterrupt:
            print(f'ding: interrupted; {checkpoint_summary(cfg.exp_name, started)}', file=sys.stderr)
            return 130
        if code:
            return code
    return 0


def checkpoint_summary(exp_name: str, started: float) -> str:
    """Which checkpoints of ``./{exp_name}`` exist and verify, per learner: the newest one this run wrote
    (at or after ``started``), else the newest earlier one; said plainly when there is none."""
    from ding.worker.resume import newest_valid_checkpoint  # deferred: verifying imports torch (only when asked)

    root = os.path.join('.', exp_name)
    try:
        dirs = sorted(d for d in os.listdir(root) if d == 'ckpt' or d.startswith('ckpt_'))
    except OSError:
        dirs = []
    lines = []
    for d in dirs:
        directory = os.path.join(root, d)
        if not os.path.isdir(directory):  # e.g. a file in its place: the reason no checkpoint could be written
            lines.append(f'{directory} is not a directory: no checkpoint there')
            continue
        path = newest_valid_checkpoint(directory, not_before=started)
        if path is not None:
            lines.append(f'checkpoint written by this run: {path}')
            continue
        earlier = newest_valid_checkpoint(directory)
        lines.append(
            f'no checkpoint of this run in {directory}'
            + (f'; the newest earlier one: {earlier}' if earlier else ' (and none from earlier)')
        )
    return '; '.join(lines) if lines else f'no checkpoint exists under {root}'


def _run_one(args: argparse.Namespace, cfg, create_cfg, system_cfg, seed: int) -> int | None:
    """Run one seed in ``args.mode``; returns an exit code when it failed with a message already printed."""
    # The pipelines import torch (the parallel one Flask and the coordinator): each is imported here, after the
    # OpenMP pool is sized and only for its own mode, so that `ding ctl`, `ding -q` and `ding --help` start
    # without them and a serial run never loads the parallel side.
    if args.mode != 'parallel':  # parallel mode: the workers size their own pools
        limit_openmp_threads()
    if args.mode == 'serial':
        from .serial_entry import serial_pipeline  # deferred: imports torch (after limit_openmp_threads)

        serial_pipeline(
            (cfg, create_cfg), seed, max_train_iter=args.train_iter, max_env_step=args.env_step, resume=args.resume
        )
    elif args.mode == 'serial_onpolicy':
        from .serial_entry_onpolicy import serial_pipeline_onpolicy  # deferred: imports torch (after the pool size)

        serial_pipeline_onpolicy(
            (cfg, create_cfg), seed, max_train_iter=args.train_iter, max_env_step=args.env_step, resume=args.resume
        )
    elif args.mode == 'eval':
        from ding.utils.checkpoint import CheckpointError  # deferred: imports torch (after limit_openmp_threads)

        from .application_entry import eval as eval_entry  # deferred: imports torch (after limit_openmp_threads)

        try:
            eval_entry((cfg, create_cfg), seed, load_path=args.load_path)
        except CheckpointError as exc:  # e.g. an unusable --load-path: one line naming the file, no traceback
            return _fail(str(exc), 1)
    elif args.mode == 'async':
        from .async_entry import async_pipeline  # deferred: imports torch (after limit_openmp_threads)

        async_pipeline(
            (cfg, create_cfg), seed, max_train_iter=args.train_iter, max_env_step=args.env_step, resume=args.resume
        )
    elif args.mode == 'seed':
        from .seed_entry import seed_pipeline  # deferred: imports torch (after limit_openmp_threads)

        seed_pipeline(
            (cfg, create_cfg), seed, max_train_iter=args.train_iter, max_env_step=args.env_step, resume=args.resume
        )
    elif args.mode == 'parallel':
        from .parallel_entry import parallel_pipeline  # deferred: Flask and the coordinator, parallel mode only

        parallel_pipeline(
            args.config,
            seed,
            exp_name=cfg.exp_name,
            max_env_step=args.env_step,
            max_train_iter=args.train_iter,
            resume=args.resume,
        )
    return None


def run() -> None:
    """The ``ding`` command: exits with ``main()``'s code (130 on Ctrl-C, without a traceback)."""
    try:
        code = main()
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


if __name__ == '__main__':
    run()
