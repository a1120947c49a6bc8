"""Where a run's outputs lie in its sink, and the credentials that reach them.

A `SinkPlace` is what a run records (run.json, the run index): bucket, the run's prefix,
endpoint and region, and the NAMES of the environment variables holding the keys —
never the keys. Whoever later has those variables set (this laptop, another machine)
reaches the run's outputs with `swjob pull`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from agent.protocol import SinkTarget
from agent.sink.layout import parse_url, run_prefix
from engine.jobs.pools import Pool


class SinkError(Exception):
    """The sink cannot be used: one line naming the pool (or run) and what to fix."""


@dataclass(frozen=True)
class SinkPlace:
    bucket: str
    prefix: str  # the run's own: <sink prefix>/<job>/<run id>
    endpoint: str | None = None
    region: str | None = None
    key_env: str = "AWS_ACCESS_KEY_ID"
    secret_env: str = "AWS_SECRET_ACCESS_KEY"
    token_env: str = "AWS_SESSION_TOKEN"

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, record: object) -> SinkPlace | None:
        if not isinstance(record, dict):
            return None
        try:
            return cls(**record)
        except TypeError:
            return None

    def sibling(self, run_id: str) -> SinkPlace:
        """The same job's run `run_id` in the same sink (an earlier attempt)."""
        parent = self.prefix.rsplit("/", 1)[0] if "/" in self.prefix else ""
        return SinkPlace(**{**asdict(self), "prefix": run_prefix(parent, "", run_id)})

    def target(
        self,
        environ: Mapping[str, str] | None = None,
        patterns: list[str] | None = None,
        sync_every_s: float | None = None,
    ) -> SinkTarget:
        """The place with its credentials from `environ` (default: this process's)."""
        env = os.environ if environ is None else environ
        missing = [name for name in (self.key_env, self.secret_env) if not env.get(name)]
        if missing:
            raise SinkError(
                f"sink {self.url}: set {' and '.join(missing)} in the environment "
                "(the sink's credentials; the pool's sink_*_env keys name other variables)"
            )
        return SinkTarget(
            bucket=self.bucket,
            prefix=self.prefix,
            endpoint=self.endpoint,
            region=self.region,
            access_key_id=env[self.key_env],
            secret_access_key=env[self.secret_env],
            session_token=env.get(self.token_env) or None,
            patterns=patterns or [],
            sync_every_s=sync_every_s,
        )


def place_for(pool: Pool, job: str, run_id: str) -> SinkPlace | None:
    """The run's place in its pool's sink; None when the pool has none."""
    if pool.sink is None:
        return None
    bucket, prefix = parse_url(pool.sink)
    return SinkPlace(
        bucket=bucket,
        prefix=run_prefix(prefix, job, run_id),
        endpoint=pool.sink_endpoint,
        region=pool.sink_region,
        key_env=pool.sink_access_key_env,
        secret_env=pool.sink_secret_key_env,
        token_env=pool.sink_session_token_env,
    )
