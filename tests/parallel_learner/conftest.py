"""Fixtures for the comm learner tests: a real FlaskFileSystemLearner and a real Master on 127.0.0.1."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for comm_helpers, whatever the import mode
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # for comm_fixtures

from comm_fixtures import define_comm_fixtures  # noqa: E402
from comm_helpers import FAST_MASTER, comm_config  # noqa: E402

from ding.worker.learner.comm import FlaskFileSystemLearner  # noqa: E402

define_comm_fixtures(globals(), FlaskFileSystemLearner, comm_config, FAST_MASTER, 'learner0')
