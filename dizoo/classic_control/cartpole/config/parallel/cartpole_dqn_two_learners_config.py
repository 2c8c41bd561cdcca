"""CartPole DQN in parallel mode with two data-parallel learners: one coordinator, two learner processes that
train the one policy together (a torch.distributed group: gloo, gradients averaged every step, each on its own
batches from the shared replay buffer) and two collector processes, all on this machine.

Run with ``ding -m parallel -c dizoo/classic_control/cartpole/config/parallel/cartpole_dqn_two_learners_config.py
-s 0``. Logs, weights and sample files go to ``./cartpole_dqn_two_learners/``. See docs/parallel.md, "Several
learners". Every other setting is ``cartpole_dqn_config.py``'s (read first, through ``base``; its comments say why).
"""

base = 'cartpole_dqn_config.py'

main_config = dict(
    exp_name='cartpole_dqn_two_learners',
    policy=dict(
        learn=dict(
            learner=dict(
                # two learners, one policy: each rank trains on its own batch of 64 (an effective batch of 128)
                learner_num=2,
                multi_learner=dict(mode='data_parallel', assignment='random', backend='gloo'),
            ),
        ),
    ),
)
system_config = dict(learner=dict(learner1=dict(comm_batches=64)))
