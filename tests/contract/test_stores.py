"""The store contract (``runlane.testing.store_contract``) on every store kind.

``make_store`` comes from ``tests/conftest.py``, parametrised over memory, SQLite and PostgreSQL.
"""

from runlane.testing.store_contract import *  # noqa: F403  the contract's tests and fixtures
