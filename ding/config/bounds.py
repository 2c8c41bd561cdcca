"""What the config layer checks, as data: value bounds, strict sections, keys allowed everywhere.

Edit these tables (and docs/config.md, which lists them) rather than the checking code.
"""

from typing import Any

# Key -> (kind, interval). A key matches a config path whose last components equal it, so
# 'batch_size' matches policy.learn.batch_size and 'eps.start' matches policy.other.eps.start.
# kind: 'int' (an integer; an integral float such as 1e5 is accepted) or 'number' (int or float).
# interval: mathematical notation, '(' / ')' open, '[' / ']' closed, 'inf' unbounded.
# None values are skipped (None means "not used" for several keys, e.g. n_sample with n_episode).
BOUNDS = {
    'learning_rate': ('number', '(0, inf)'),
    'batch_size': ('int', '[1, inf)'),
    'update_per_collect': ('int', '[1, inf)'),
    'n_sample': ('int', '[1, inf)'),
    'discount_factor': ('number', '(0, 1]'),
    'gae_lambda': ('number', '[0, 1]'),
    'clip_ratio': ('number', '(0, inf)'),
    'nstep': ('int', '[1, inf)'),
    'replay_buffer_size': ('int', '[1, inf)'),
    'eval_freq': ('int', '[0, inf)'),
    'collector_env_num': ('int', '[1, inf)'),
    'evaluator_env_num': ('int', '[1, inf)'),
    # env sections of the generic gymnasium type and the vector envs (docs/envs.md)
    'env.max_episode_steps': ('int', '[1, inf)'),
    'env.noop_max': ('int', '[0, inf)'),
    'env.frame_skip': ('int', '[1, inf)'),
    'env.stack_num': ('int', '[1, inf)'),
    'env.img_height': ('int', '[1, inf)'),
    'env.img_width': ('int', '[1, inf)'),
    'env.repeat_action_probability': ('number', '[0, 1]'),
    'manager.wait_num': ('int', '[1, inf)'),
    'eps.start': ('number', '[0, 1]'),
    'eps.end': ('number', '[0, 1]'),
    'entropy_weight': ('number', '[0, inf)'),
    'value_weight': ('number', '[0, inf)'),
    'target_update_freq': ('int', '[1, inf)'),
    'target_theta': ('number', '(0, 1]'),
    # r2d2: sequence lengths, DI-engine's momentum key, the sequence priority's max/mean mix
    'burnin_step': ('int', '[0, inf)'),
    'learn_unroll_len': ('int', '[1, inf)'),
    'target_update_theta': ('number', '(0, 1]'),
    'priority_eta': ('number', '[0, 1]'),
    # the learner's checkpoint section (policy.learn.learner.checkpoint, ding.utils.checkpoint_settings)
    'checkpoint.every_env_steps': ('int', '[1, inf)'),
    'checkpoint.every_minutes': ('number', '(0, inf)'),
    'checkpoint.keep_n': ('int', '[1, inf)'),
    'checkpoint.compression_level': ('int', '[1, 22]'),
    'checkpoint.shard_mb': ('number', '(0, 4096]'),
    'checkpoint.upload_retries': ('int', '[0, 100]'),
    'checkpoint.retry_seconds': ('number', '(0, 600]'),
    'checkpoint.max_parallel': ('int', '[1, 64]'),
    'checkpoint.flush_seconds': ('number', '[0, inf)'),
    'nan_guard.lr_cut_factor': ('number', '(0, 1]'),
    'nan_guard.max_consecutive_bad': ('int', '[1, inf)'),
    'nan_guard.max_rollbacks': ('int', '[0, inf)'),
    # parallel mode: policy.learn.learner / policy.collect.collector
    'learner_num': ('int', '[1, inf)'),
    'collector_num': ('int', '[1, inf)'),
    'send_policy_freq': ('int', '[1, inf)'),
    'update_policy_second': ('number', '[0, inf)'),
    'comm_batches': ('int', '[1, inf)'),
    'multi_learner.timeout': ('number', '(0, inf)'),
    'max_staleness': ('number', '[0, inf]'),
    'max_use': ('number', '(0, inf]'),
    # the replay service's client (policy.other.replay_buffer, ding.worker.replay_service)
    'replay_buffer.prefetch_depth': ('int', '[1, 64]'),
    'replay_buffer.replay_timeout': ('number', '(0, inf)'),
    'replay_buffer.degraded_after': ('int', '[1, inf)'),
    'replay_buffer.sample_wait': ('number', '[0, inf)'),
    # async pipeline: policy.async_actor (ding.worker.async_actor.config)
    'async_actor.actor_num': ('int', '[1, inf)'),
    'async_actor.env_per_actor': ('int', '[1, inf)'),
    'async_actor.unroll_len': ('int', '[1, inf)'),
    'async_actor.trajectory_queue_size': ('int', '[1, inf)'),
    'async_actor.staging_queue_size': ('int', '[1, 2]'),
    'async_actor.updates_per_batch': ('int', '[1, inf)'),
}

# Key -> the values it may take (matched like BOUNDS): settings that name a mode. A value must equal one of them and
# be of its type (1 is not True).
CHOICES = {
    # parallel mode: several learners (policy.learn.learner.multi_learner, docs/parallel.md "Several learners")
    'multi_learner.mode': ('failover', 'data_parallel'),
    'multi_learner.assignment': ('random', 'bins'),
    'multi_learner.on_group_done': ('assist', 'short'),
    'multi_learner.backend': ('gloo', 'nccl'),
    # parallel collectors with policy_transport='http': poll /weights/current, or follow /weights/stream
    'weights_refresh': ('poll', 'subscribe'),
    'checkpoint.compression': (None, 'zstd'),
    'checkpoint.on_stall': ('continue', 'pause'),
    # data-parallel learners (docs/distributed.md): what the gradient all-reduce carries (None: lossless; names of
    # ding.utils.pytorch_ddp_dist_helper.GRAD_SYNC_DTYPES), and whether it overlaps the backward
    'learn.grad_sync_dtype': (None, 'bfloat16', 'float16'),
    'learn.overlap_gradient_sync': (False, True),
}

# Subtrees where bounds are not applied: model kwargs are checked by the model's constructor.
BOUNDS_SKIP = ('policy.model',)

# Sections whose keys (at any depth) must be known to the defaults of the component that owns them:
# an unknown key there is almost always a typo. Sections not listed (env, policy.model, top level,
# policy's own top-level keys) are free-form: env-specific keys and model kwargs are legitimate.
STRICT_SECTIONS = ('policy.learn', 'policy.collect', 'policy.eval', 'policy.other', 'env.manager')

# Sections whose known keys get a type check against the default value's type (a superset of the
# strict sections: policy's own keys such as cuda / discount_factor are typed but not strict).
TYPED_SECTIONS = STRICT_SECTIONS + ('policy',)

# Keys the serial pipelines and workers read from the policy's sections whatever the policy declares
# (DI-engine policies often leave e.g. collect.n_sample out of their defaults): known in these sections.
PIPELINE_KEYS = {
    # resume_training: DI-engine's switch, read by ding.worker.resume (resume from the learner's
    # load_ckpt_before_run checkpoint, or 'auto')
    # grad_sync_dtype / overlap_gradient_sync: how the Policy base averages gradients over data-parallel ranks
    'policy.learn': (
        'batch_size',
        'update_per_collect',
        'learner',
        'resume_training',
        'grad_sync_dtype',
        'overlap_gradient_sync',
    ),
    'policy.collect': ('n_sample', 'n_episode', 'unroll_len', 'collector'),
    'policy.eval': ('evaluator',),
    'policy.other': ('replay_buffer', 'commander'),
    # ding.worker.resume: store the buffer in every checkpoint, so a resumed run keeps its data.
    # ding.worker.replay_service: a replay server instead of the in-process buffer (docs/replay.md).
    'policy.other.replay_buffer': (
        'save_with_checkpoint',
        'replay_address',
        'prefetch_depth',
        'replay_timeout',
        'degraded_after',
        'sample_wait',
    ),
    # the comm learner reads these from the learner config of its start task (parallel mode)
    'policy.learn.learner': ('comm_batches', 'max_staleness'),
}

# Top-level keys of a main config besides the component sections (env, policy, reward_model, ...): what the
# pipelines read there. Any other top-level key is refused as a typo (e.g. ``srvice=dict(...)``).
# wandb_logger: DI-engine's configs carry it; accepted so they load (this framework does not log to wandb).
TOP_LEVEL_KEYS = (
    'exp_name',
    'seed',
    'env',
    'policy',
    'service',
    'resume',
    'console',  # what a run prints on the console: 'quiet', 'normal', 'verbose' (ding.utils.console)
    'world_size',  # written by the pipelines that ran on several ranks (informational)
    'reward_model',
    'world_model',
    'wandb_logger',
)

# The system section of a parallel config (``ding.config.system``): its own keys with their defaults (a None
# default is checked by ``SYSTEM_TYPES``), and the keys a worker entry (``system.learner.learner0``) may hold
# besides its comm worker's defaults.
SYSTEM_KEYS: dict[str, Any] = dict(
    coordinator=dict(),
    path_data=None,
    path_policy=None,
    communication_mode='auto',
    learner_gpu_num=0,
    # a file holding the run secret (multi-host runs); None: one is generated per run
    secret_file=None,
    # TLS for every server and client of the run (multi-host runs): all three paths, or none (plain HTTP)
    tls=dict(cert_file=None, key_file=None, ca_file=None),
    # bounds of every server of the run; None keeps the server's default (ding.interaction.config)
    http=dict(control_body_bytes=None, data_body_bytes=None, read_timeout=None, max_connections=None),
    learner=dict(),
    collector=dict(),
    comm_learner=dict(),
    comm_collector=dict(),
)
# Keys of system.coordinator filled by the parallel transform, accepted from the user too.
# port_auto: set by the compiler when port was 'auto' (the chosen port may be replaced by a free one at start)
COORDINATOR_ADDRESS_KEYS: dict[str, Any] = dict(
    host='127.0.0.1', port=None, port_auto=False, learner=dict(), collector=dict()
)
WORKER_ENTRY_KEYS: dict[str, Any] = dict(type='', import_names=[], host='127.0.0.1', port=None, torch_threads=1)
# System keys whose default is None: the types they accept, as (types, description).
SYSTEM_TYPES = {
    'path_data': ((str,), 'a path string or None'),
    'path_policy': ((str,), 'a path string or None'),
    'secret_file': ((str,), 'a path string or None'),
}

# Bounds of the system section, matched like BOUNDS (last path components). Ports are checked where they are
# resolved (ding.config.parallel_system).
SYSTEM_BOUNDS = {
    'coordinator.collector_task_timeout': ('number', '(0, inf]'),
    'coordinator.learner_task_timeout': ('number', '(0, inf]'),
    'coordinator.collector_request_timeout': ('number', '(0, inf)'),
    'coordinator.learner_request_timeout': ('number', '(0, inf)'),
    'coordinator.task_retries': ('int', '[0, inf)'),
    'coordinator.retry_delay': ('number', '[0, inf)'),
    'coordinator.max_samples_per_iter': ('number', '(0, inf)'),
    'coordinator.pacing_warmup_samples': ('int', '[0, inf)'),
    'coordinator.heartbeat_tolerance': ('number', '(0, inf)'),
    'coordinator.heartbeat_check_span': ('number', '(0, inf)'),
    'coordinator.request_retries': ('int', '[0, inf)'),
    'coordinator.request_retry_waiting': ('number', '[0, inf)'),
    'coordinator.reconnect_interval': ('number', '(0, inf)'),
    'coordinator.log_every_iter': ('int', '[1, inf)'),
    'coordinator.data_gc_interval': ('number', '(0, inf)'),
    'coordinator.data_gc_min_age': ('number', '[0, inf)'),
    'learner_gpu_num': ('int', '[0, inf)'),
    # the servers' bounds (docs/security.md): a control body must hold a connect request (a few hundred bytes),
    # a data body a task; one thread per connection
    'http.control_body_bytes': ('int', '[1024, 16777216]'),
    'http.data_body_bytes': ('int', '[1024, 4294967296]'),
    'http.read_timeout': ('number', '(0, 3600]'),
    'http.max_connections': ('int', '[1, 4096]'),
    # worker entries (system.learner.learnerI / system.collector.collectorI)
    'comm_batches': ('int', '[1, inf)'),
    'send_policy_freq': ('int', '[1, inf)'),
    'send_policy_min_interval': ('number', '[0, inf)'),
    'load_workers': ('int', '[1, inf)'),
    'heartbeat_span': ('number', '(0, inf)'),
    'request_retries': ('int', '[0, inf)'),
    'request_retry_waiting': ('number', '[0, inf)'),
    'request_timeout': ('number', '(0, inf)'),
    'stop_timeout': ('number', '(0, inf)'),
    'queue_size': ('int', '[1, inf)'),
    'data_wait_second': ('number', '(0, inf)'),
    'torch_threads': ('int', '[1, inf)'),
}

# Keys accepted in any section without appearing in its defaults.
ALWAYS_KNOWN = ('type', 'import_names', 'cfg_type', 'allow_unknown_keys')

# Cross-field rules: (condition key, [(small key, large key)]) -> small must not exceed large when the
# condition is truthy and both are set. On-policy: a minibatch cannot be larger than the rollout.
NOT_EXCEEDING = (('policy.on_policy', (('policy.learn.batch_size', 'policy.collect.n_sample'),)),)

# Environment variable that, set to 1, lets compile_config accept unknown keys everywhere.
ALLOW_UNKNOWN_ENV = 'DING_ALLOW_UNKNOWN_KEYS'
