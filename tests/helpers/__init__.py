"""Helpers shared by the tests, one submodule per job (``wait``, ``processes``, toy components...)."""
