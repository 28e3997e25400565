"""The run configuration's former import path, which the documentation shows: the classes are
defined in :mod:`transformer.run.config`."""

from transformer.run.config import DataConfig, RunConfig, TrainConfig

__all__ = ["DataConfig", "RunConfig", "TrainConfig"]
