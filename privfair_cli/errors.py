"""The one exception type the CLI turns into a one-line message and a non-zero exit."""


class PrivfairError(Exception):
    """A user-facing error: bad config, missing data file, budget overspent, ..."""


class ConfigError(PrivfairError):
    """A config value is invalid; raised before any data is touched."""


class DataError(PrivfairError):
    """A dataset file is missing, malformed or does not match its card."""


class BudgetExceeded(PrivfairError):
    """A plugin tried to spend more privacy budget than the run was given."""


class ResultsError(PrivfairError):
    """A results folder cannot be written or read (read-only, missing, disk full)."""


class RunFolderTaken(ResultsError):
    """A run folder holds a complete result of another config, which a run never replaces."""


class TrainingFailed(PrivfairError):
    """A trained model is unusable (non-finite parameters or scores): its metrics would mean nothing."""
