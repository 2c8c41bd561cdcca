"""The one exception type the config layer raises for bad config files and values."""


class ConfigError(ValueError):
    """A config file or value is wrong. The message names the file or the full key path."""
