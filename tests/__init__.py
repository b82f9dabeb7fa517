import pytest

# The contract suites are modules the test files subclass: their asserts show values too.
pytest.register_assert_rewrite("tests.contracts")
