"""Hydra entry points that compose the stages (data -> features -> models -> MLflow).

Registers the ``pid`` resolver the configs' ``hydra.run.dir`` use: a run folder named by the time to the microsecond
and the process id, so jobs started together never share one."""

import os


def _register_resolvers() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("pid"):
        OmegaConf.register_new_resolver("pid", os.getpid)


_register_resolvers()
