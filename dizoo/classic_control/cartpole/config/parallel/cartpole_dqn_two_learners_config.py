"""CartPole DQN in parallel mode with two data-parallel learners: one coordinator, two learner processes that
train the one policy together (a torch.distributed group: gloo, gradients averaged every step, each on its own
batches from the shared replay buffer) and two collector processes, all on this machine.

Run with ``ding -m parallel -c dizoo/classic_control/cartpole/config/parallel/cartpole_dqn_two_learners_config.py
-s 0``. Logs, weights and sample files go to ``./cartpole_dqn_two_learners/``. See docs/parallel.md, "Several
learners". The rest of the settings are those of ``cartpole_dqn_config.py`` (its comments say why).
"""

from easydict import EasyDict

cartpole_dqn_two_learners_config = dict(
    exp_name='cartpole_dqn_two_learners',
    env=dict(
        collector_env_num=8,
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=195,
    ),
    policy=dict(
        cuda=False,
        model=dict(
            obs_shape=4,
            action_shape=2,
            encoder_hidden_size_list=[128, 128, 64],
            dueling=True,
        ),
        nstep=1,
        discount_factor=0.97,
        learn=dict(
            batch_size=64,
            # half the serial config's 0.001: with 0.001 about one run in eight had the greedy return climb to
            # 150-190, collapse and climb again (1800-2200 iterations to solve instead of 600-950); with 0.0005,
            # 18 runs of the benchmark took 700-1020 iterations
            learning_rate=0.0005,
            learner=dict(
                # two learners, one policy: each rank trains on its own batch of 64 (an effective batch of 128)
                learner_num=2,
                multi_learner=dict(mode='data_parallel', assignment='random', backend='gloo'),
                # publish the weights every 10 iterations (DI-engine: every iteration); collectors reload
                # them every update_policy_second anyway, and each publish costs the learner a snapshot
                send_policy_freq=10,
                # batches prepared ahead by the learner's data loader, refilled in bursts of 24: each wake-up
                # of the loader thread also costs the training thread a hand-over of the GIL (the comm learner
                # builds a learn task's 64 batches at once, so a refill only hands them over)
                dataloader=dict(queue_maxsize=32, refill_at=8),
            ),
        ),
        collect=dict(
            n_sample=16,
            collector=dict(
                collector_num=2,
                # reload the learner's newest weights every 0.5 s (DI-engine: 3 s): this learner does ~250
                # iterations a second, so 3 s old weights act with a policy ~750 iterations behind
                update_policy_second=0.5,
                # training samples per collect task: short tasks free a collector for the next evaluation
                # soon and pick up the newest epsilon
                n_sample=256,
                # samples per data file: few big files keep the learner's file cache warm
                chunk_size=512,
            ),
        ),
        other=dict(
            eps=dict(
                type='linear',
                start=0.95,
                end=0.1,
                decay=10000,
            ),
            # sample metadata kept by the coordinator; uniform sampling (DQN here uses no priorities)
            replay_buffer=dict(replay_buffer_size=20000, priority=False),
            commander=dict(
                # one collector task per collector (collector_task_space defaults to collector_num);
                # an evaluation every eval_interval seconds. DQN's greedy policy on CartPole first reaches
                # 200 for only ~50-100 iterations, then swings between 100 and 190 for thousands (the
                # serial pipeline catches that window with an evaluation every 40 iterations); at ~300
                # iterations a second, 1 s between evaluations missed it in most runs, 0.2 s in some; an
                # evaluation task is ~0.1 s of one collector, which pacing leaves idle most of the time
                eval_interval=0.1,
            ),
        ),
    ),
)
cartpole_dqn_two_learners_config = EasyDict(cartpole_dqn_two_learners_config)
main_config = cartpole_dqn_two_learners_config

cartpole_dqn_two_learners_create_config = dict(
    env=dict(
        type='cartpole',
        import_names=['dizoo.classic_control.cartpole.envs.cartpole_env'],
    ),
    env_manager=dict(type='base'),
    policy=dict(type='dqn_command'),
    learner=dict(type='base', import_names=['ding.worker.learner.base_learner']),
    collector=dict(
        type='zergling',
        import_names=['ding.worker.collector.zergling_parallel_collector'],
    ),
    commander=dict(
        type='solo',
        import_names=['ding.worker.coordinator.solo_parallel_commander'],
    ),
    comm_learner=dict(
        type='flask_fs',
        import_names=['ding.worker.learner.comm.flask_fs_learner'],
    ),
    comm_collector=dict(
        type='flask_fs',
        import_names=['ding.worker.collector.comm.flask_fs_collector'],
    ),
    replay_buffer=dict(type='advanced'),
)
cartpole_dqn_two_learners_create_config = EasyDict(cartpole_dqn_two_learners_create_config)
create_config = cartpole_dqn_two_learners_create_config

cartpole_dqn_two_learners_system_config = dict(
    coordinator=dict(
        # collectors may hand over at most 4 samples per learner iteration beyond the first 512: a replay
        # ratio near the serial pipeline's, and CPU left for the learner
        max_samples_per_iter=4,
        pacing_warmup_samples=512,
    ),
    # the comm learner asks for 64 batches per data demand: one coordinator round trip (two HTTP tasks, each
    # a thread in the learner) serves 64 iterations (~0.2 s of training), fetched while the previous batches
    # still train (with 32: ~3 % more learner CPU per iteration; the same iterations to solve);
    # the weights are published every 0.1 s at most, so that evaluations see each ~30-iteration step
    learner=dict(
        learner0=dict(comm_batches=64, send_policy_min_interval=0.1),
        learner1=dict(comm_batches=64),
    ),
    # shared directories of sample files and policy weights (every process must see them);
    # '{exp_name}' is replaced by the experiment name
    path_data='./{exp_name}/data',
    path_policy='./{exp_name}/policy',
    communication_mode='auto',
    learner_gpu_num=0,
)
cartpole_dqn_two_learners_system_config = EasyDict(cartpole_dqn_two_learners_system_config)
system_config = cartpole_dqn_two_learners_system_config

if __name__ == '__main__':
    from ding.entry.parallel_entry import parallel_pipeline

    parallel_pipeline((main_config, create_config, system_config), seed=0)
