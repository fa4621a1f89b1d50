"""What every process of a chaos run needs to know, passed as one JSON file."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

GROUP = "chaos"
"""The remote workers' group."""

LEASE = 3.0
"""The engines' lease: short, so a frozen engine loses its runs' leases while it is alive."""


@dataclass(frozen=True)
class Config:
    pg_url: str
    redis_url: str
    prefix: str  # the Redis transport's key prefix
    dir: str  # where the side-effect logs, the producer's record and the outputs go
    seed: int
    seconds: float

    @property
    def root(self) -> Path:
        return Path(self.dir)

    def save(self) -> Path:
        path = self.root / "config.json"
        path.write_text(json.dumps(asdict(self)))
        return path

    @classmethod
    def load(cls, path: str) -> Config:
        return cls(**json.loads(Path(path).read_text()))
