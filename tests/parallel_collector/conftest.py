"""Fixtures for the comm collector tests: a real FlaskFileSystemCollector and a real Master on 127.0.0.1."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for collector_helpers, whatever the import mode
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # for comm_fixtures

from collector_helpers import FAST_MASTER, comm_config  # noqa: E402
from comm_fixtures import define_comm_fixtures  # noqa: E402

from ding.worker.collector.comm import FlaskFileSystemCollector  # noqa: E402

define_comm_fixtures(globals(), FlaskFileSystemCollector, comm_config, FAST_MASTER, 'collector0')
