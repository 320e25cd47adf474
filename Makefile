# Developer shortcuts; the README's Quickstart commands are the canonical ones.
PY ?= python

.PHONY: install test serve bench replay stress

install:
	pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
	    && pip install -e '.[test]'

test:
	$(PY) -m pytest

serve:
	$(PY) -m kvpool serve

bench:
	$(PY) -m bench.pool --json out/pool.json
	$(PY) -m bench.copy --json out/copy.json
	$(PY) -m bench.serve --json out/serve.json
	$(PY) -m bench.async_pool --json out/async_pool.json
	$(PY) -m bench.sched --json out/sched.json
	$(PY) -m bench.policies --json out/policies.json

replay:
	$(PY) -m kvpool replay data/traces/mooncake_conversation_trace.jsonl --instant \
	    --policy lru --capacity-blocks 4000 --json out/replay.json

stress:
	$(PY) -m stress pool --duration 20
	$(PY) -m stress http --duration 20 --clients 32
