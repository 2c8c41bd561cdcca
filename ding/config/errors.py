"""The one exception type the config layer raises for bad config files and values."""


class ConfigError(ValueError):
    """A config file or value is wrong. The message names the file or the full key path."""


# The key a worker sets (True) in the result of a task it refuses because of the config (a ``ConfigError``):
# every worker would refuse it again, so the coordinator ends the run with that reason instead of a retry.
CONFIG_REFUSAL = 'config_error'
