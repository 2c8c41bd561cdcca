"""Fixtures for the comm learner tests: a real FlaskFileSystemLearner and a real Master on 127.0.0.1."""

from ding.worker.learner.comm import FlaskFileSystemLearner
from tests.helpers.comm_fixtures import define_comm_fixtures
from tests.helpers.comm_learner import FAST_MASTER, comm_config

define_comm_fixtures(globals(), FlaskFileSystemLearner, comm_config, FAST_MASTER, 'learner0')
