"""Fixtures for the HTTP suite: servers started per test, stopped cleanly at teardown, and
their logs printed when a test fails (see mlserver.py for the process handling)."""

from pathlib import Path

import pytest

from mlserver import AUTH_CONFIG, MEMORY_LIMIT_MB, Server, ServerFactory, server_binary


@pytest.fixture(scope="session")
def server_bin() -> Path:
    return server_binary()


@pytest.fixture
def start_server(server_bin: Path, tmp_path: Path):
    """`start_server(config_text=None)` starts a server with that TOML config and returns it."""
    factory = ServerFactory(server_bin, tmp_path)
    yield factory
    factory.stop_all()


@pytest.fixture
def start_limited_server(server_bin: Path, tmp_path: Path):
    """Like `start_server`, each server under the memory limit (mlserver.MEMORY_LIMIT_MB of
    address space): an attack that would take the machine's memory aborts the server instead,
    and `Server.death()` says how. `hosted.hosted_server(start_limited_server, …)` starts a
    hosted one."""
    factory = ServerFactory(server_bin, tmp_path, memory_limit=MEMORY_LIMIT_MB << 20)
    yield factory
    factory.stop_all()


@pytest.fixture
def server(start_server) -> Server:
    """A server without auth on a fresh data file."""
    return start_server()


@pytest.fixture
def auth_server(start_server) -> Server:
    """A server with auth on: username admin, password secret."""
    return start_server(AUTH_CONFIG)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "setup" or not report.failed:
        return
    servers = []
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, Server):
            servers.append(value)
        elif isinstance(value, ServerFactory):
            servers.extend(value.servers)
    seen = set()
    for server in servers:
        if id(server) in seen:
            continue
        seen.add(id(server))
        died = server.death()
        title = f"mindlite-server log ({server.workdir.name}{', ' + died if died else ''})"
        report.sections.append((title, server.log_tail()))
