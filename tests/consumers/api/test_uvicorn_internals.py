"""consumers/api/bounded.py subclasses uvicorn's h11 protocol and reads its private state (the
connection's ``cycle``, ``conn``, ``connections``, the cycle's flags): only the uvicorn that
pyproject.toml pins is tested end to end (tests/security/test_bounded.py). This test names the
private code that changed when uvicorn is upgraded, so the subclass is checked against it
before the pin moves."""

from __future__ import annotations

import hashlib
import inspect
import re
import tomllib
from pathlib import Path

import uvicorn
from uvicorn.protocols.http import h11_impl

# uvicorn's private code BoundedH11Protocol overrides, calls or reads the state of, as of the
# version pyproject.toml pins, by the first 16 hex digits of the sha256 of its source.
PRIVATE_API = {
    "H11Protocol.__init__": "ad1ed8e837b2db8d",  # self.app, conn, cycle, connections, loop, transport
    "H11Protocol.connection_made": "6efb565ff3d36b91",  # overridden: the connection cap
    "H11Protocol.connection_lost": "dbb688fa2b386000",  # overridden: the deadline disarmed
    "H11Protocol.data_received": "e03b145518ca44aa",  # overridden: the header cap
    "H11Protocol.handle_events": "278f2d7efca279a3",  # overridden: a new cycle is a request's headers in
    "H11Protocol.on_response_complete": "1fbb8f48c6a1afc4",  # overridden: idle between requests
    "H11Protocol.send_400_response": "56937b748fc59d92",  # overridden: h11's header cap answered 431
    "H11Protocol.timeout_keep_alive_handler": "fcd7338529fe645e",  # closes an idle connection
    "RequestResponseCycle.__init__": "d245415af679f8ad",  # response_started, disconnected, more_body, ...
    "RequestResponseCycle.send": "76b4bcb0998bed0e",  # response_started, response_complete
    "RequestResponseCycle.receive": "2d138e9944fff369",  # disconnected ends the app's reads
}


def _digest(name: str) -> str:
    found: object = h11_impl
    for part in name.split("."):
        found = getattr(found, part)
    return hashlib.sha256(inspect.getsource(found).encode()).hexdigest()[:16]  # type: ignore[arg-type]


def test_the_private_uvicorn_code_bounded_relies_on_is_unchanged() -> None:
    changed = [name for name, digest in PRIVATE_API.items() if _digest(name) != digest]
    assert not changed, (
        f"uvicorn {uvicorn.__version__} changed the private uvicorn.protocols.http.h11_impl"
        f" code that consumers/api/bounded.py subclasses or reads: {changed}. Compare"
        " BoundedH11Protocol with it, then update PRIVATE_API and uvicorn's pin in"
        " pyproject.toml."
    )


def test_pyproject_pins_uvicorn_to_the_tested_minor_version() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())
    (pin,) = [d for d in pyproject["project"]["dependencies"] if re.match(r"uvicorn\b", d)]
    major, minor = uvicorn.__version__.split(".")[:2]
    assert pin == f"uvicorn>={major}.{minor},<{major}.{int(minor) + 1}", pin


def test_every_forwarded_allow_ips_setting_is_trusted_by_uvicorn_as_it_reads() -> None:
    """Addresses and networks (the end-to-end check of a network is
    tests/security/test_bounded.py), and ``*`` in a list, which uvicorn takes only alone."""
    from uvicorn.middleware.proxy_headers import _TrustedHosts

    from consumers.api.server import _proxies

    listed = _TrustedHosts(_proxies("127.0.0.1, 10.0.0.0/8,2001:db8::/32"))
    assert "127.0.0.1" in listed and "10.1.2.3" in listed and "2001:db8:1::5" in listed
    assert "192.0.2.1" not in listed and "11.0.0.1" not in listed
    assert "192.0.2.1" in _TrustedHosts(_proxies("127.0.0.1,*"))
