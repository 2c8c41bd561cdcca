"""Distributed evolution strategies: the noise table and rollouts of ES workers (the server: ``ding -m es``)."""
