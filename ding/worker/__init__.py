"""Workers: learner, collectors, evaluator, replay buffers, coordinator. Names resolve lazily so that
the serial path never imports the HTTP side (Flask) and ``import ding.worker`` stays cheap."""
from importlib import import_module as _import

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


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(_import(_EXPORTS[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ding.worker' has no attribute '{name}'")
