"""Console sign-in throttling (``proxy.console.throttle``): wrong tokens spend an address's
bucket (an IPv6 address by its /64) and the shared one; an empty bucket refuses with a wait;
forwarded addresses and TLS count only from trusted front ends."""

from __future__ import annotations

import ipaddress

from aiohttp.test_utils import make_mocked_request

from proxy.console.throttle import SignInThrottle, client_address, over_tls

TRUSTED = (ipaddress.ip_network("127.0.0.0/8"),)


def test_an_address_is_refused_once_its_burst_is_spent_then_refills() -> None:
    throttle = SignInThrottle(per_address=(3, 10.0), total=(100, 0.1))
    for _ in range(3):
        assert throttle.refused("10.0.0.1", now=0) is None
        throttle.wrong_token("10.0.0.1", now=0)
    assert throttle.refused("10.0.0.1", now=0) == ("address", 10)
    assert throttle.refused("10.0.0.2", now=0) is None  # another address
    assert throttle.refused("10.0.0.1", now=10) is None  # one token back after 10 s


def test_an_ipv6_address_counts_by_its_64_and_all_share_the_total() -> None:
    throttle = SignInThrottle(per_address=(1, 60.0), total=(2, 60.0))
    throttle.wrong_token("2001:db8::1", now=0)
    assert throttle.refused("2001:db8::ffff", now=0) == ("address", 60)
    throttle.wrong_token("192.0.2.1", now=0)
    assert throttle.refused("198.51.100.7", now=0) == ("total", 60)


def test_forwarded_headers_count_only_from_a_trusted_peer() -> None:
    forwarded = {"X-Forwarded-For": "203.0.113.9, 127.0.0.2", "X-Forwarded-Proto": "https"}
    req = make_mocked_request("POST", "/admin/ui/login", headers=forwarded).clone(
        remote="127.0.0.1")
    assert client_address(req, TRUSTED) == "203.0.113.9"  # past every trusted hop
    assert over_tls(req, TRUSTED)
    assert client_address(req, ()) == "127.0.0.1" and not over_tls(req, ())
    plain = make_mocked_request("POST", "/admin/ui/login").clone(remote="127.0.0.1")
    assert client_address(plain, TRUSTED) == "127.0.0.1" and not over_tls(plain, TRUSTED)
    far = make_mocked_request("POST", "/", headers=forwarded).clone(remote="198.51.100.1")
    assert client_address(far, TRUSTED) == "198.51.100.1" and not over_tls(far, TRUSTED)
