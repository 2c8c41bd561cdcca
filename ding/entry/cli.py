"""The ``ding`` command: ``ding -m serial -c cfg.py -s 0``; ``ding ctl ...`` controls a running training."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable
from functools import partial

from ding import __version__
from ding.config import ConfigError, read_config
from ding.utils.atomic_file import StorageError
from ding.utils.builtin import import_builtin_components
from ding.utils.console import CONSOLE_ENV, console_level_problem
from ding.utils.registry import REGISTRIES

from .ctl import main as ctl_main
from .lifeline import die_with_launcher
from .plot import main as plot_main
from .rank_launcher import launch_ranks
from .startup import limit_openmp_threads
from .summary import main as summary_main

MODES = ('serial', 'serial_onpolicy', 'eval', 'parallel', 'async', 'seed', 'es')
RANK_MODES = ('serial', 'serial_onpolicy', 'async')  # the modes that run on several ranks (--nproc, torchrun)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='ding',
        description='Train and evaluate reinforcement-learning agents.',
        epilog='example: ding -m serial -c dizoo/classic_control/cartpole/config/cartpole_dqn_config.py -s 0\n'
        'control a running training: ding ctl {status,pause,resume,tune,terminate} --exp-dir ./EXP_NAME\n'
        'learning curves of runs: ding plot ./EXP_A ./EXP_B -o curves.png; a table of them: ding summary ./EXP_*\n'
        'a SEED actor on another host: ding seed-actor --connect HOST:PORT --actor-id I -c cfg.py\n'
        'an ES worker on another host: ding es-worker --connect HOST:PORT --token T\n'
        'a replay service: ding replay-server --port P; ding learner -c cfg.py --replay HOST:P --weights HOST:W; '
        'ding replay-feed -c cfg.py --replay HOST:P --weights HOST:W',
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
    p.add_argument(
        '--nproc',
        type=int,
        default=1,
        help='serial / serial_onpolicy / async: run on N rank processes that average their gradients '
        "(docs/distributed.md); under torchrun (RANK and WORLD_SIZE set) the ranks are torchrun's",
    )
    p.add_argument(
        '--max-restarts',
        type=int,
        default=3,
        help='--nproc: restart the ranks from the newest checkpoint at most this many times after one dies',
    )
    p.add_argument(
        '--min-nproc', type=int, help='--nproc: each restart drops one rank, down to this many (default: --nproc)'
    )
    talk = p.add_mutually_exclusive_group()
    talk.add_argument(
        '-v',
        '--verbose',
        action='store_true',
        help="also print every learner / evaluator / hook table on the console (config key console='verbose'); "
        'alone, as in DI-engine, the same as --version',
    )
    talk.add_argument(
        '-q',
        '--quiet',
        nargs='?',
        const=True,
        default=False,
        metavar='REGISTRY',
        help="print only the summary line and errors (console='quiet'); with a registry name, as in DI-engine, "
        'the same as --query-registry REGISTRY',
    )
    p.add_argument('--version', action='version', version=f'ding {__version__}')
    p.add_argument(
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


def _replay_command(name: str, argv: list[str]) -> int:
    """``ding replay-server`` / ``ding learner`` / ``ding replay-feed`` (they need the replay extra)."""
    if name == 'replay-server':
        from ding.worker.replay_service.server_main import main as command  # deferred: grpc, this mode only
    elif name == 'learner':
        from .learner_service import main as command  # deferred: torch and grpc, this mode only
    else:
        from .replay_feed import main as command  # deferred: torch and grpc, this mode only
    return command(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == 'ctl':  # `ding ctl status|pause|resume|tune|terminate ...` (ding.entry.ctl)
        return ctl_main(argv[1:])
    if argv and argv[0] == 'plot':  # `ding plot EXP_DIR ... -o curves.png` (ding.entry.plot)
        return plot_main(argv[1:])
    if argv and argv[0] == 'summary':  # `ding summary EXP_DIR ...` (ding.entry.summary)
        return summary_main(argv[1:])
    if argv and argv[0] == 'seed-actor':  # a SEED actor on another host (docs/seed.md)
        from ding.worker.seed.remote_actor import main as seed_actor_main  # deferred: pyzmq is optional

        return seed_actor_main(argv[1:])
    if argv and argv[0] in ('replay-server', 'learner', 'replay-feed'):  # the replay service (docs/replay.md)
        limit_openmp_threads()
        return _replay_command(argv[0], argv[1:])
    if argv and argv[0] == 'es-worker':  # `ding es-worker --connect HOST:PORT --token T` (ding.worker.es)
        limit_openmp_threads()
        from ding.worker.es.worker_main import main as es_worker_main  # deferred: torch and msgpack, this mode only

        return es_worker_main(argv[1:])
    args = build_parser().parse_args(argv)
    console_before = os.environ.get(CONSOLE_ENV)
    try:
        return _main(args)
    finally:  # a caller of main() in its own process (tests, scripts) gets its environment back
        if console_before is None:
            os.environ.pop(CONSOLE_ENV, None)
        else:
            os.environ[CONSOLE_ENV] = console_before


def _main(args: argparse.Namespace) -> int:
    # DI-engine's habits: `ding -q REGISTRY` lists a registry and a lone `ding -v` prints the version.
    if isinstance(args.quiet, str):
        return _query(args.quiet)
    if args.query_registry:
        return _query(args.query_registry)
    if args.verbose and not args.mode and not args.config:
        print(f'ding {__version__}')
        return 0
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

    problem = _set_console_level(args, main_cfg)
    if problem:
        return _fail(problem)
    seeds = args.seed or [0]
    problem = _check_rank_args(args)
    if problem:
        return _fail(problem)
    if args.resume is not None:
        if args.mode == 'eval':
            return _fail('--resume applies to training modes; -m eval takes --load-path')
        if len(seeds) > 1 and args.resume not in ('auto', 'never'):
            return _fail('--resume PATH continues one run; with several seeds use --resume auto')
    in_group = int(os.environ.get('WORLD_SIZE', '1') or 1) > 1 and 'RANK' in os.environ
    in_group = in_group and args.mode in RANK_MODES  # started by `ding --nproc` or torchrun: one rank of them
    if in_group:
        leave_group = _join_rank_group(main_cfg)
    try:
        for seed in seeds:
            cfg = main_cfg
            exp_name = args.exp_name or cfg.get('exp_name', 'default_experiment')
            cfg.exp_name = _exp_name_for_seed(exp_name, seed, len(seeds))
            code: int | None
            if args.nproc > 1 and not in_group:
                code = launch_ranks(
                    partial(_rank_argv, args, seed, cfg.exp_name), args.nproc, args.max_restarts, args.min_nproc
                )
            else:
                code = _run_seed(args, cfg, create_cfg, system_cfg, seed)
            if code:
                return code
    finally:
        if in_group:
            leave_group()
    return 0


def _run_seed(args: argparse.Namespace, cfg, create_cfg, system_cfg, seed: int) -> int | None:
    """Run one seed in this process; the exit code when it failed (the message printed), else None."""
    started = time.time()
    talks = os.environ.get('RANK', '0') == '0'  # with several ranks, rank 0 speaks for the run
    try:
        return _run_one(args, cfg, create_cfg, system_cfg, seed)
    except ConfigError as exc:
        return _fail(str(exc))
    except StorageError as exc:  # a file the disk refused: one line naming it and what exists, not a traceback
        return _fail(f'{exc}; {checkpoint_summary(cfg.exp_name, started)}' if talks else str(exc), 1)
    except KeyboardInterrupt:
        if talks:
            print(f'ding: interrupted; {checkpoint_summary(cfg.exp_name, started)}', file=sys.stderr)
        return 130
    except Exception as exc:
        if talks:
            raise
        # Another rank: mostly a collective broken by rank 0 leaving (Ctrl-C, a failure it reports itself).
        return _fail(
            f'rank {os.environ.get("RANK")}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ""}', 1
        )


def _set_console_level(args: argparse.Namespace, main_cfg) -> str | None:
    """``-q`` / ``-v``, else the config's ``console`` key, as ``DING_CONSOLE``: the processes of the run (ranks,
    workers, actors) inherit it. A level already in the environment is kept when neither flag is given."""
    level = 'verbose' if args.verbose else 'quiet' if args.quiet else None
    if level is None and main_cfg.get('console') is not None:
        level = main_cfg.get('console')
        problem = console_level_problem(level, f"{args.config}: top-level key 'console'")
        if problem:
            return problem
    if level is not None:
        os.environ[CONSOLE_ENV] = level
    return None


def _check_rank_args(args: argparse.Namespace) -> str | None:
    if args.nproc < 1:
        return f'--nproc must be >= 1, got {args.nproc}'
    if args.nproc > 1 and args.mode not in RANK_MODES:
        return f'--nproc runs -m {{{",".join(RANK_MODES)}}} on several ranks, not -m {args.mode}'
    if args.max_restarts < 0:
        return f'--max-restarts must be >= 0, got {args.max_restarts}'
    if args.min_nproc is not None and not 1 <= args.min_nproc <= args.nproc:
        return f'--min-nproc must be between 1 and --nproc ({args.nproc}), got {args.min_nproc}'
    return None


def _rank_argv(args: argparse.Namespace, seed: int, exp_name: str, run_dir: str | None, resume: str | None) -> list:
    """The ``ding`` arguments of every rank of ``ding --nproc``: one seed, its run directory; on a restart the
    directory rank 0 used and the checkpoint to resume from."""
    argv = ['-m', args.mode, '-c', args.config, '-s', str(seed), '--exp-name', run_dir or exp_name]
    argv += ['--train-iter', str(args.train_iter), '--env-step', str(args.env_step)]
    resume = resume if resume is not None else args.resume
    return argv + (['--resume', resume] if resume is not None else [])


def _join_rank_group(main_cfg) -> Callable[[], None]:
    """This process is one rank of several (started by ``ding --nproc`` or torchrun): join their group; returns
    the function that leaves it."""
    die_with_launcher()  # started by `ding --nproc`: end with it (nothing happens under torchrun)
    limit_openmp_threads()
    from .rank_group import join_rank_group_from_environment, leave_rank_group  # deferred: imports torch

    join_rank_group_from_environment(bool((main_cfg.get('policy') or {}).get('cuda')))
    return leave_rank_group


def checkpoint_summary(exp_name: str, started: float) -> str:
    """Which checkpoints of ``./{exp_name}`` exist and verify, per learner: the newest one this run wrote
    (at or after ``started``), else the newest earlier one; said plainly when there is none."""
    from ding.worker.resume_choice import newest_valid_checkpoint  # deferred: verifying imports torch (only when asked)

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
    elif args.mode == 'es':
        from .es_entry import es_pipeline  # deferred: imports torch (after limit_openmp_threads)

        es_pipeline(
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
