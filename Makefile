# The two commands of the README: `make test` and `make demo`. Both create or reuse .venv.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
export OMP_NUM_THREADS := 1
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test demo lint bench clean lock

# pip byte-compiles one file at a time, a third of the install (a fresh `make install`, measured: 156 s, against
# 108 s with --no-compile and compileall on every core). A file written for a newer Python (torch ships one)
# cannot compile here and is never imported, so a compile failure is not an install error: Python reads any file
# without bytecode from source.
$(BIN)/.installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --no-compile -c constraints.txt torch==2.14.1 torchvision==0.29.1
	$(BIN)/python -m pip install -q --no-compile -c constraints.txt -e '.[dev,nifti,xlsx]'
	$(BIN)/python -m compileall -qq -j 0 $(VENV)/lib || true
	touch $@

install: $(BIN)/.installed

test: install
	$(BIN)/python -m pytest -q -x --timeout 900 tests

lint: install
	$(BIN)/ruff check .

demo: install
	$(BIN)/medgrpo demo --out runs/demo

bench: install
	$(BIN)/python eval/bench.py

clean:
	rm -rf runs build *.egg-info

# Pin every package at what .venv holds now (after changing a dependency in pyproject.toml): constraints.txt is the
# lock every install goes through.
lock: install
	{ sed -n '/^#/p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

