"""The run service on: run control (``ding ctl pause | resume | tune | terminate | status``), ``/metrics``
(Prometheus) and ``/healthz`` over HTTP; in parallel mode each learner also serves its weights.

Combine it with an experiment (serial or parallel) in a config file of your own::

    base = ['dizoo/classic_control/cartpole/config/cartpole_dqn_config.py', 'configs/service.py']

The address and the token are printed at start and written to ``./{exp_name}/run.json``; then
``ding ctl status --exp-dir ./{exp_name}``. See docs/operations.md.
"""

main_config = dict(
    service=dict(
        enable=True,
        # this machine only; '0.0.0.0' lets a Prometheus elsewhere scrape it (control still needs the token)
        host='127.0.0.1',
        port=0,  # any free port (in run.json)
        token=None,  # a random token per run
        health_stuck_seconds=300.0,
    ),
)
