"""Fixtures shared by several test modules."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def compose():
    """Compose the sweep's Hydra config from conf/ with overrides: compose("policy=lru", ...)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from sweep.config import find_conf_dir, register_generated

    from sweep.config import ConfigError
    from sweep.schema import compose_error

    conf = find_conf_dir()
    register_generated(conf)

    def compose(*ov):  # a value the schema refuses is bad input, as on the command line
        try:
            return hydra_compose("config", overrides=list(ov))
        except Exception as e:
            msg = compose_error(e)
            if msg:
                raise ConfigError(msg) from None
            raise

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        yield compose
    GlobalHydra.instance().clear()


@pytest.fixture
def lcs():
    """libCacheSim's module for a test that compares with it (tests.helpers.libcachesim:
    skipped when missing, a failure under KVSWEEP_REQUIRE_REFERENCES=1)."""
    from tests.helpers import libcachesim

    return libcachesim()
