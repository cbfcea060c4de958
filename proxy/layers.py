"""Policy resolution: platform → organization → user.

The request path calls ``PolicyService.resolve(org, user)``, which must never touch the database
(it answers from an in-memory cache, invalidated on change).
"""

from __future__ import annotations

from proxy.config import PlatformConfig
from proxy.policy import Policy, build_policy


class PolicyService:
    def __init__(self, platform: PlatformConfig) -> None:
        self.platform = platform
        self._cache: dict[tuple[str, str | None], Policy] = {}

    def resolve(self, org: str, user: str | None = None) -> Policy:
        """The effective policy for a caller."""
        key = (org, user)
        policy = self._cache.get(key)
        if policy is None:
            spec = self.platform.orgs.get(org)
            layers = [self.platform.defaults]
            if spec is not None:
                layers.append(spec.policy)
                if user is not None and user in spec.users:
                    layers.append(spec.users[user])
            policy = self._cache[key] = build_policy(*layers)
        return policy
