"""Structured logs: one JSON object per line in ``./{exp_name}/log/events.jsonl`` (run start and end, a
``train`` event with the scalars every ``json_log_every`` iterations, run-control events), beside the text logs.
No HTTP server is started for it; combine it with ``service.py`` for both.

Combine it with an experiment (serial or parallel) in a config file of your own::

    base = ['dizoo/classic_control/cartpole/config/cartpole_dqn_config.py', 'configs/json_logs.py']

See docs/operations.md, "Structured event log".
"""

main_config = dict(
    service=dict(
        json_log=True,
        json_log_every=100,  # a 'train' event every 100 iterations (0: none)
    ),
)
