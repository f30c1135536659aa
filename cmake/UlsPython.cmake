# Finds the Python that runs the project's test suites and tools: the project's own
# environment, .venv/ (scripts/install-deps.sh builds it from requirements.txt), never
# whatever python3 this machine has first on PATH. The Makefile passes
# -DPython3_EXECUTABLE=<source>/.venv/bin/python; a build configured by hand gets the same
# default when .venv/ exists. Include it where find_package(Python3) would go; each
# directory includes it again, since find_package's results are per directory.
#
# ULS_PYTHON_REQUIRED: set it to ON before the include where Python is required.
set(ULS_VENV_PYTHON ${PROJECT_SOURCE_DIR}/.venv/bin/python)
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS ${ULS_VENV_PYTHON})
  set(Python3_EXECUTABLE ${ULS_VENV_PYTHON} CACHE FILEPATH
      "Python of the test suites and tools (the project's .venv)")
endif()
if(ULS_PYTHON_REQUIRED)
  find_package(Python3 COMPONENTS Interpreter REQUIRED)
else()
  find_package(Python3 COMPONENTS Interpreter)
endif()
if(Python3_Interpreter_FOUND AND NOT Python3_EXECUTABLE STREQUAL ULS_VENV_PYTHON)
  get_property(uls_python_warned GLOBAL PROPERTY ULS_PYTHON_WARNED)
  if(NOT uls_python_warned)
    set_property(GLOBAL PROPERTY ULS_PYTHON_WARNED ON)
    message(WARNING "Python suites will run with ${Python3_EXECUTABLE}, not the project's "
            "environment ${ULS_VENV_PYTHON}: run `make deps` and configure with "
            "-DPython3_EXECUTABLE=${ULS_VENV_PYTHON} (toolchain.python_env fails until then)")
  endif()
endif()
