"""The ``policy.seed`` settings: Ape-X exploration spread over every actor, local and remote."""

import pytest

from ding.worker.seed.config import SEED_DEFAULTS, SeedSettings


def _settings(**section) -> SeedSettings:
    return SeedSettings.from_config(dict(SEED_DEFAULTS, **section))


def test_epsilons_spread_from_eps_down_to_eps_to_the_one_plus_alpha_over_all_actors():
    settings = _settings(actor_num=2, remote_actor_num=2, eps=0.4, eps_alpha=7)
    eps = [settings.actor_eps(i) for i in range(4)]
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4**8)  # the last remote actor ends the range
    assert eps == sorted(eps, reverse=True)


def test_a_single_actor_explores_with_eps():
    assert _settings(actor_num=1, remote_actor_num=0, eps=0.3).actor_eps(0) == pytest.approx(0.3)
