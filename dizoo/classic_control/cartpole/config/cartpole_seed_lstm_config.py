"""CartPole SEED IMPALA with an LSTM core: the learner's inference server keeps each actor env's recurrent state
between requests, and every unroll carries the state its V-trace re-run starts from. Run with
``ding -m seed -c dizoo/classic_control/cartpole/config/cartpole_seed_lstm_config.py -s 0``.

Every other setting is ``cartpole_seed_a2c_config.py``'s (read first, through ``base``). With
``env.wrappers=['mask_velocity']`` and ``model.obs_shape=2`` the velocities are hidden and only the LSTM can
recover them (the memory task of tests/entry/test_async_memory.py)."""

base = 'cartpole_seed_a2c_config.py'

main_config = dict(
    exp_name='cartpole_seed_lstm_seed0',
    policy=dict(model=dict(lstm_hidden_size=32)),
)
