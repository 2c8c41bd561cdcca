"""Workers: learner, collectors, evaluator, replay buffers, coordinator. Names resolve lazily so that
the serial path never imports the HTTP side (Flask) and ``import ding.worker`` stays cheap."""

from ding.utils.lazy_import import lazy_exports

_EXPORTS = {
    'BaseLearner': '.learner',
    'create_learner': '.learner',
    'LearnerHook': '.learner',
    'register_learner_hook': '.learner',
    'BaseCommLearner': '.learner.comm',
    'FlaskFileSystemLearner': '.learner.comm',
    'create_comm_learner': '.learner.comm',
    'SampleSerialCollector': '.collector',
    'EpisodeSerialCollector': '.collector',
    'InteractionSerialEvaluator': '.collector',
    'create_serial_collector': '.collector',
    'BaseCommCollector': '.collector.comm',
    'FlaskFileSystemCollector': '.collector.comm',
    'create_comm_collector': '.collector.comm',
    'create_parallel_collector': '.collector',
    'NaiveReplayBuffer': '.replay_buffer',
    'AdvancedReplayBuffer': '.replay_buffer',
    'create_buffer': '.replay_buffer',
    'BaseSerialCommander': '.coordinator',
    'create_serial_commander': '.coordinator',
    'Coordinator': '.coordinator',
}

__all__ = list(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
