"""Parallel mode on this machine: one coordinator, one learner and two collector processes.

Combine it with an experiment (its env, policy and model) in a config file of your own::

    base = ['dizoo/classic_control/cartpole/config/cartpole_dqn_config.py', 'configs/parallel_one_host.py']

and run ``ding -m parallel -c that_file.py -s 0``. Sample files and weights go to ``./{exp_name}/data`` and
``./{exp_name}/policy``; every port is a free one found at start.
"""

main_config = dict(
    policy=dict(
        learn=dict(learner=dict(learner_num=1)),
        collect=dict(collector=dict(collector_num=2)),
        # an evaluation task at most every second (the default, 60 s, is longer than a whole CartPole run);
        # the run ends when an evaluation reaches env.stop_value
        other=dict(commander=dict(eval_interval=1.0)),
    ),
)

# The parallel components; the experiment's env, env manager and policy stay as it names them.
create_config = dict(
    learner=dict(type='base', import_names=['ding.worker.learner.base_learner']),
    collector=dict(type='zergling', import_names=['ding.worker.collector.zergling_parallel_collector']),
    commander=dict(type='solo', import_names=['ding.worker.coordinator.solo_parallel_commander']),
    comm_learner=dict(type='flask_fs', import_names=['ding.worker.learner.comm.flask_fs_learner']),
    comm_collector=dict(type='flask_fs', import_names=['ding.worker.collector.comm.flask_fs_collector']),
    # the coordinator keeps the samples' metadata in an advanced buffer (staleness, use counts, priorities)
    replay_buffer=dict(type='advanced'),
)

system_config = dict(
    coordinator=dict(host='127.0.0.1', port='auto'),
    # '{exp_name}' is replaced by the experiment name
    path_data='./{exp_name}/data',
    path_policy='./{exp_name}/policy',
    communication_mode='auto',
    learner_gpu_num=0,
)
