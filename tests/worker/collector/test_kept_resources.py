"""KeptResources: one finished task's resources, handed to the next task built from the same configuration."""

from ding.worker.collector.kept_resources import KeptResources


class Envs:
    """Stands in for a task's envs: all KeptResources needs of them is close()."""

    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


def test_take_hands_over_what_was_kept_under_the_same_key():
    kept, envs = KeptResources(), Envs()
    kept.keep('cartpole', envs)
    assert kept.holding
    assert kept.take('cartpole') is envs and not envs.closed
    assert not kept.holding and kept.take('cartpole') is None


def test_a_different_key_closes_what_was_kept():
    kept, envs = KeptResources(), Envs()
    kept.keep('cartpole', envs)
    assert kept.take('pendulum') is None
    assert envs.closed and not kept.holding


def test_keeping_again_closes_the_older_resources():
    kept, old, new = KeptResources(), Envs(), Envs()
    kept.keep('cartpole', old)
    kept.keep('cartpole', new)
    assert old.closed and not new.closed and kept.take('cartpole') is new


def test_close_closes_what_is_kept_and_anything_kept_later():
    kept, envs, late = KeptResources(), Envs(), Envs()
    kept.keep('cartpole', envs)
    kept.close()
    assert envs.closed and not kept.holding
    kept.keep('cartpole', late)  # a task thread ending after its comm collector closed
    assert late.closed and not kept.holding
