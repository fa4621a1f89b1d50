"""A chaos run of runlane on real processes (``make chaos``).

Three engine processes and two remote-step workers on a PostgreSQL and a Redis server of the
run's own execute a mixed workload that a producer process starts continuously, while a seeded
fault injector kills, freezes and restarts them and their servers (and, on a primary and a
standby, fails the database over). Afterwards the checker reads the store and the side-effect
log every step execution appended to, and counts every broken invariant. See RELIABILITY.md.
"""
