"""The project's Python environment, .venv/ at the repository root (scripts/install-deps.sh
builds it from requirements.txt). Every tool runs in it, whatever python3 started it:

    if __name__ == "__main__":
        projenv.use()
        sys.exit(main())
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, ".venv")
PYTHON = os.path.join(VENV, "bin", "python")
# Set in the environment of the re-run, so that a broken .venv cannot loop.
GUARD = "ULS_PROJENV_REEXEC"


def active():
    """True when this interpreter is the project's environment."""
    return os.path.realpath(sys.prefix) == os.path.realpath(VENV)


def use():
    """Re-runs the calling script with the project's interpreter, unless it runs there
    already; exits with a message when .venv/ is missing."""
    if active():
        # The re-run is done: the programs this one starts decide for themselves.
        os.environ.pop(GUARD, None)
        return
    name = os.path.basename(sys.argv[0])
    if not os.access(PYTHON, os.X_OK):
        sys.exit("%s: the project's Python environment %s is missing: run `make deps` "
                 "(scripts/install-deps.sh) first" % (name, VENV))
    if os.environ.get(GUARD):
        sys.exit("%s: %s does not run as the project's environment (sys.prefix %s): "
                 "remove %s and run `make deps`" % (name, PYTHON, sys.prefix, VENV))
    os.environ[GUARD] = "1"
    script = os.path.abspath(sys.argv[0])
    os.execv(PYTHON, [PYTHON, script] + sys.argv[1:])
