"""Fixtures of the Python tests. They import the package the test command staged (the
workspace build's extension with the pure-Python sources), or an installed one."""

import pytest

import mindlite


@pytest.fixture
def con():
    """A fresh in-memory database."""
    connection = mindlite.connect()
    yield connection
    connection.close()


@pytest.fixture
def path(tmp_path):
    """A database file path that does not exist yet."""
    return tmp_path / "data" / "test.redb"
