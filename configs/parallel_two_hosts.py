"""Parallel mode on two machines: the coordinator and the learner on host A, two collectors on host B.

Builds on ``parallel_one_host.py``. Both hosts must see the experiment directory ``DING_SHARED_DIR`` (NFS or
the like; default ``/shared``). Set the addresses before running, on both hosts:

- ``DING_COLLECTOR_HOST``: host B's address, where the coordinator reaches the collectors (default 10.0.0.2);
- ``DING_COORDINATOR_PORT``, ``DING_COLLECTOR_PORT``: the coordinator's port and the first collector's
  (the second uses the next one); both must be open between the hosts (defaults 22270 and 22272).

Combine it with an experiment in a config file of your own::

    base = ['dizoo/classic_control/cartpole/config/cartpole_dqn_config.py', 'configs/parallel_two_hosts.py']

On host A run ``ding -m parallel -c that_file.py -s 0``: it starts the learner and writes
``./{exp_name}/parallel_config.json``. On host B start each collector with that file::

    python -m ding.entry.parallel_worker --role collector --name collector0 --config parallel_config.json
    python -m ding.entry.parallel_worker --role collector --name collector1 --config parallel_config.json
"""

import os

base = 'parallel_one_host.py'

_shared = os.environ.get('DING_SHARED_DIR', '/shared')
_collector_host = os.environ.get('DING_COLLECTOR_HOST', '10.0.0.2')
_collector_port = int(os.environ.get('DING_COLLECTOR_PORT', '22272'))

system_config = dict(
    # listen on every interface of host A; the collectors on host B call back the address they were reached from
    coordinator=dict(host='0.0.0.0', port=int(os.environ.get('DING_COORDINATOR_PORT', '22270'))),
    path_data=os.path.join(_shared, '{exp_name}', 'data'),
    path_policy=os.path.join(_shared, '{exp_name}', 'policy'),
    # learner0 has no host: it runs on host A beside the coordinator, on a free port
    collector=dict(
        collector0=dict(host=_collector_host, port=_collector_port),
        collector1=dict(host=_collector_host, port=_collector_port + 1),
    ),
)
