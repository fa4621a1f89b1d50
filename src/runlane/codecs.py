"""Codecs: what turns a payload's bytes into the bytes stored and sent, and back.

An engine or worker given a codec (``Engine(codec=...)``, ``Worker(codec=...)``) applies it to
every payload it writes to the store or puts on the wire, and undoes it on every payload it
reads (see :mod:`runlane.payloads` for which values are payloads and how an encoded one is
stored). :class:`Fernet` is the one runlane ships: authenticated encryption with keys that
rotate. Any object with ``encode`` and ``decode`` will do (compression, a KMS's envelope
encryption); ``decode`` raises on bytes it cannot read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from .errors import ConfigurationError
from .extras import needs_extra


@runtime_checkable
class Codec(Protocol):
    """Two functions over bytes that undo each other: ``decode(encode(data)) == data``.

    ``decode`` raises (any exception) when it cannot read ``data``: the reader then reports a
    ``PayloadCodecError`` naming whose payload it was. Both run on the event loop's thread for
    every payload, so they should take microseconds, not block on I/O."""

    def encode(self, data: bytes) -> bytes: ...

    def decode(self, data: bytes) -> bytes: ...


class Fernet:
    """Encrypt payloads with Fernet (AES-128-CBC and HMAC-SHA256, from the ``cryptography``
    library: the ``crypto`` extra, ``runlane[crypto]``).

    ``keys`` is a list of keys as ``cryptography.fernet.Fernet.generate_key()`` makes them
    (url-safe base64 text or bytes of 32 random bytes). Payloads are encrypted with the first
    key and decrypted with whichever key opens them, so keys rotate: put the new key first and
    keep the old ones after it until nothing written under them is left (or still read).
    """

    def __init__(self, keys: Sequence[str | bytes]) -> None:
        if isinstance(keys, str | bytes) or not keys:
            raise ConfigurationError(
                "Fernet(keys) takes a list of keys, the one to encrypt with first:"
                " Fernet([key]) for one key"
            )
        with needs_extra("crypto", "runlane.codecs.Fernet"):
            from cryptography.fernet import Fernet as _Fernet
            from cryptography.fernet import MultiFernet
        self._fernet: Any = MultiFernet([_key(_Fernet, key, i) for i, key in enumerate(keys)])
        self.keys = len(keys)

    def encode(self, data: bytes) -> bytes:
        token: bytes = self._fernet.encrypt(data)
        return token

    def decode(self, data: bytes) -> bytes:
        plain: bytes = self._fernet.decrypt(data)
        return plain

    def __repr__(self) -> str:
        return f"Fernet(<{self.keys} key{'s' if self.keys != 1 else ''}>)"  # never the keys


def _key(fernet: Any, key: Any, index: int) -> Any:
    if not isinstance(key, str | bytes):
        raise ConfigurationError(f"Fernet key #{index + 1} is a {type(key).__name__}, not text")
    try:
        return fernet(key)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(
            f"Fernet key #{index + 1} is not a Fernet key ({exc}): make one with"
            " cryptography.fernet.Fernet.generate_key()"
        ) from None


__all__ = ["Codec", "Fernet"]
