"""Real servers for tests: a throwaway PostgreSQL, a Temporal dev server, headless Chromium.

Each module starts one kind of server and knows nothing about pytest, so benchmarks and
scripts can reuse it; ``tests.support.fixtures`` turns them into pytest fixtures (loaded
by ``pytest_plugins`` in ``tests/conftest.py``) and skips with a clear reason when a
binary is missing.
"""
