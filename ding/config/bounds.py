"""What the config layer checks, as data: value bounds, strict sections, keys allowed everywhere.

Edit these tables (and docs/config.md, which lists them) rather than the checking code.
"""

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
    'eps.start': ('number', '[0, 1]'),
    'eps.end': ('number', '[0, 1]'),
    'entropy_weight': ('number', '[0, inf)'),
    'value_weight': ('number', '[0, inf)'),
    'target_update_freq': ('int', '[1, inf)'),
    'target_theta': ('number', '(0, 1]'),
    'nan_guard.lr_cut_factor': ('number', '(0, 1]'),
    'nan_guard.max_consecutive_bad': ('int', '[1, inf)'),
    'nan_guard.max_rollbacks': ('int', '[0, inf)'),
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
    'policy.learn': ('batch_size', 'update_per_collect', 'learner'),
    'policy.collect': ('n_sample', 'n_episode', 'unroll_len', 'collector'),
    'policy.eval': ('evaluator',),
    'policy.other': ('replay_buffer', 'commander'),
    # ding.worker.resume: store the buffer in every checkpoint, so a resumed run keeps its data.
    'policy.other.replay_buffer': ('save_with_checkpoint',),
}

# Keys accepted in any section without appearing in its defaults.
ALWAYS_KNOWN = ('type', 'import_names', 'cfg_type', 'allow_unknown_keys')

# Cross-field rules: (condition key, [(small key, large key)]) -> small must not exceed large when the
# condition is truthy and both are set. On-policy: a minibatch cannot be larger than the rollout.
NOT_EXCEEDING = (('policy.on_policy', (('policy.learn.batch_size', 'policy.collect.n_sample'),)),)

# Environment variable that, set to 1, lets compile_config accept unknown keys everywhere.
ALLOW_UNKNOWN_ENV = 'DING_ALLOW_UNKNOWN_KEYS'
