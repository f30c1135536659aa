"""The environment a harness gives the processes it starts."""

import os


def clean_env(extra=None, drop_preload=True):
    """This process's environment without any ULSOCK_* variable and, unless DROP_PRELOAD
    is false, without LD_PRELOAD; then EXTRA (a dict) on top. Whatever ran the harness,
    what it starts gets only the ulsock settings the harness asks for."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ULSOCK_") and not (drop_preload and k == "LD_PRELOAD")}
    env.update(extra or {})
    return env
