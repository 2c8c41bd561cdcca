"""ding: a lean reinforcement-learning framework with DI-engine's learner/coordinator architecture."""

__version__ = '0.1.0'
