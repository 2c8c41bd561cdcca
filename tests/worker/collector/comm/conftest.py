"""Fixtures for the comm collector tests: a real FlaskFileSystemCollector and a real Master on 127.0.0.1."""

from ding.worker.collector.comm import FlaskFileSystemCollector
from tests.helpers.comm_collector import FAST_MASTER, comm_config
from tests.helpers.comm_fixtures import define_comm_fixtures

define_comm_fixtures(globals(), FlaskFileSystemCollector, comm_config, FAST_MASTER, 'collector0')
