"""The async actor-learner pipeline (Sebulba design): actor threads, a trajectory queue, a staging queue."""
