"""The ``policy.async_actor`` settings: defaults for missing keys, env groups with and without double buffering."""

from ding.worker.async_actor import ASYNC_ACTOR_DEFAULTS, AsyncActorSettings


def test_missing_keys_take_the_defaults():
    settings = AsyncActorSettings.from_config(dict(actor_num=3))
    assert settings.actor_num == 3
    assert settings.unroll_len == ASYNC_ACTOR_DEFAULTS['unroll_len'] and settings.staging_queue_size == 1


def test_double_buffering_splits_an_actors_envs_into_two_groups():
    assert AsyncActorSettings.from_config(dict(env_per_actor=8)).envs_per_group == 4
    single = AsyncActorSettings.from_config(dict(env_per_actor=8, double_buffer=False))
    assert (single.env_groups, single.envs_per_group) == (1, 8)
