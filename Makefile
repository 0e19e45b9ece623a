# The two commands that do all the set-up on a fresh machine (README): each makes the virtual environment, or
# reuses it, then
#   make quickstart   runs the main job on the embedded default (offline, CPU): out/quickstart/
#   make test         runs the tests (two pytest-xdist workers, one test file per worker at a time);
#                     ARGS=tests/recipe/test_recipe.py runs one file
# VENV=DIR puts the environment elsewhere (.ci/run gives it a fresh one); PYTHON=python3.12 picks the interpreter.
PYTHON ?= python3
VENV ?= .venv
# any torch >= 2.4 works; pinned and installed first because an unpinned install pulls a multi-GB CUDA build
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
# the set-up is redone only when pyproject.toml (the dependencies) changes or the environment is gone
STAMP := $(VENV)/.mathneuro-edit-installed

.PHONY: quickstart test venv

quickstart: $(STAMP)
	$(BIN)/mathneuro-edit run recipes/quickstart.yaml --out out/quickstart --overwrite

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile $(ARGS)

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)
