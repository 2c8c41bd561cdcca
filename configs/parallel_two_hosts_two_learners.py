"""Parallel mode on two machines with two data-parallel learners: host A runs the coordinator and learner0 (rank 0
of the learners' torch.distributed group), host B runs learner1 (rank 1) and a collector.

Builds on ``parallel_one_host.py``. Both hosts must see the experiment directory ``DING_SHARED_DIR`` (NFS or the
like; default ``/shared``): sample files and the policy file go there. Set the same variables on both hosts:

- ``DING_HOST_A``, ``DING_HOST_B``: each host's address on the network between them (defaults 10.0.0.1 and
  10.0.0.2). The coordinator listens on host A's address, and the collector calls it back there;
- ``DING_COORDINATOR_PORT`` (host A, default 22270), ``DING_LEARNER_PORT`` (learner0 on host A, learner1 on host
  B: the next one; default 22271), ``DING_COLLECTOR_PORT`` (host B, default 22273), ``DING_DIST_PORT`` (the
  learner group's rendezvous on host A, default 22274): open them between the hosts, with the ports gloo picks
  between the learners (docs/parallel.md, "On real machines");
- ``GLOO_SOCKET_IFNAME`` on both hosts: the interface facing the other host (gloo would take the address the host
  name resolves to, often a loopback one).

Combine it with an experiment in a config file of your own::

    base = ['dizoo/classic_control/cartpole/config/parallel/cartpole_dqn_two_learners_config.py',
            'configs/parallel_two_hosts_two_learners.py']

On host A run ``ding -m parallel -c that_file.py -s 0``: it starts learner0 and writes
``./{exp_name}/parallel_config.json``. On host B start the other two workers with that file::

    python -m ding.entry.parallel_worker --role learner --name learner1 --config parallel_config.json
    python -m ding.entry.parallel_worker --role collector --name collector0 --config parallel_config.json
"""

import os

base = 'parallel_one_host.py'

_shared = os.environ.get('DING_SHARED_DIR', '/shared')
_host_a = os.environ.get('DING_HOST_A', '10.0.0.1')
_host_b = os.environ.get('DING_HOST_B', '10.0.0.2')
_learner_port = int(os.environ.get('DING_LEARNER_PORT', '22271'))

main_config = dict(
    policy=dict(
        # the two learners train one policy together: one torch.distributed group (docs/parallel.md, "Several
        # learners"), whose rendezvous rank 0 opens on host A at coordinator.dist_port
        learn=dict(learner=dict(learner_num=2, multi_learner=dict(mode='data_parallel'))),
        collect=dict(collector=dict(collector_num=1)),
        # an evaluation every 0.5 s at most: the one collector runs them between its collect tasks (an experiment's
        # 0.1 s left it no time to collect; parallel_one_host.py's 1 s can miss DQN's first window at 200)
        other=dict(commander=dict(eval_interval=0.5)),
    ),
)

system_config = dict(
    # host A's address, not the wildcard: the collector calls back the address the coordinator hands out, and
    # a wildcard hands out the machine's default-route address, which need not be the one host B reaches
    coordinator=dict(
        host=_host_a,
        port=int(os.environ.get('DING_COORDINATOR_PORT', '22270')),
        dist_port=int(os.environ.get('DING_DIST_PORT', '22274')),
    ),
    path_data=os.path.join(_shared, '{exp_name}', 'data'),
    path_policy=os.path.join(_shared, '{exp_name}', 'policy'),
    learner=dict(
        # learner0 runs on host A beside the coordinator (the pipeline starts it): rank 0, whose address the
        # other rank reaches for the group's rendezvous
        learner0=dict(host=_host_a, port=_learner_port),
        learner1=dict(host=_host_b, port=_learner_port + 1),
    ),
    collector=dict(collector0=dict(host=_host_b, port=int(os.environ.get('DING_COLLECTOR_PORT', '22273')))),
)
