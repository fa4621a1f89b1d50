"""The package version, in one place: setuptools reads it for the metadata."""

__version__ = "0.1.0"
