"""Fixtures of the command-line tests: `prepared` (one prepared Multi30k model dir per test
run) lives in tests/conftest.py, where tests/test_first_hour.py sees it too."""
