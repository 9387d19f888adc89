# The README's first two commands: `make run` launches the app, `make test` runs the tests.
.PHONY: setup setup-all run test lint bench package smoke

setup:
	scripts/setup.sh

setup-all:
	scripts/setup.sh --all

run: setup
	.venv/bin/specdec-studio

test: setup-all
	QT_QPA_PLATFORM=offscreen .venv/bin/python -m pytest

# the rules are pyproject.toml's [tool.ruff]; .ci/run lints before it tests
lint: setup-all
	.venv/bin/ruff check app engine tests

bench: setup-all
	for b in tests/bench/*.py; do .venv/bin/python $$b || exit 1; done

# the wheel, the sdist and the frozen Linux bundle in dist/ (see packaging/README.md), smoke-tested
package:
	scripts/package.sh

smoke:
	packaging/smoke.sh dist/specdec-studio
