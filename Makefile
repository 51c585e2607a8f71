# make demo: set up .venv and run the main job; make test: the fast tier (unit, property and proof
# tests, no slow ones); make test-all: ruff, mypy and every test, with the peers installed (what CI
# runs); make lint: ruff and mypy only.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.sigma-ref-installed

.PHONY: install demo test test-all ruff lint readme

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# the main job: the corpus audit of the seed post's example, then a conformance report
demo: install
	$(VENV)/bin/sigma-ref audit 0.5 0.3 0.15 0.08 0.03 --G 8
	$(VENV)/bin/sigma-ref check tests.gallery.correct:trl_contiguous --layout contiguous \
		--loss tests.gallery.correct:token_mean_loss

# pytest-xdist: one worker per core; a file's tests stay on one worker (nbval runs a notebook's
# cells in order in one kernel, and module fixtures are shared)
XDIST := -n auto --dist loadfile

test: install
	$(PY) -m pytest $(XDIST) -m "not slow"

# lint first: an unformatted file or a type error fails CI before the long test run starts
test-all: install peers lint
	$(PY) -m pytest $(XDIST)

ruff: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy reads [tool.mypy] in pyproject.toml: sigma_ref/ and spec/, strict
lint: ruff
	$(VENV)/bin/mypy

readme: install
	$(PY) tests/readme_blocks.py --write

# make proofs: re-execute every proofs/NN_topic.py (jupytext percent, the source of truth) into
# its NN_topic.ipynb with fixed cell ids and no timing metadata; a second run changes nothing.
.PHONY: proofs
proofs: install
	$(PY) proofs/build.py

# make peers: install TRL, verl, OpenRLHF, AReaL, ms-swift, SkyRL and Unsloth (CPU, ~1.2 GB) for
# the adapters in spec/adapters and `sigma-ref matrix`; the main install stays light. `make test-all`
# (what CI runs) installs them, so docs/matrix.md is regenerated from the named
# versions and checked. `make readme` rewrites the generated blocks of README.md and docs/matrix.md.
PEERS_STAMP := $(VENV)/.sigma-ref-peers-installed
.PHONY: peers
peers: $(PEERS_STAMP)

$(PEERS_STAMP): spec/adapters/install_peers.sh | $(STAMP)
	bash spec/adapters/install_peers.sh $(PIP)
	touch $(PEERS_STAMP)

