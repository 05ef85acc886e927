"""Encryption at rest: ``ONWARD_AES_KEY`` → AES-GCM for checkpoints, artifacts, ledger rows,
run requests and event details.

Checkpoints go through LangGraph's ``EncryptedSerializer`` with :class:`Cipher`; onward's
own text columns and artifact bodies use the same cipher (``enc:`` + base64 of nonce, tag,
ciphertext). GCM authenticates: a wrong key or a changed byte fails loudly, never decrypts
to garbage. The store records a key check at creation, so a missing or wrong key is
reported when the store is opened, before anything is read or written.
"""

from __future__ import annotations

import base64
import os

from onward.errors import EncryptionKeyError
from onward.settings import settings

KEY_ENV = "ONWARD_AES_KEY"
NAME = "aesgcm"
_PREFIX = "enc:"
_KEY_HELP = (
    f"{KEY_ENV} must be 16, 24 or 32 bytes of text, or 'base64:' followed by the base64 of "
    '16, 24 or 32 bytes (make one with: python -c "import os,base64;'
    "print('base64:'+base64.b64encode(os.urandom(32)).decode())\")"
)


def parse_key(text: str) -> bytes:
    try:
        key = (
            base64.b64decode(text[7:], validate=True)
            if text.startswith("base64:")
            else text.encode()
        )
    except (ValueError, UnicodeEncodeError):  # binascii.Error: not base64; non-ASCII text
        raise EncryptionKeyError(
            f"{KEY_ENV} is not valid base64 after 'base64:'; {_KEY_HELP}"
        ) from None
    if len(key) not in (16, 24, 32):
        raise EncryptionKeyError(f"{KEY_ENV} is {len(key)} bytes long; {_KEY_HELP}")
    return key


class Cipher:
    """AES-GCM with a fresh 12-byte nonce per message. Implements LangGraph's
    ``CipherProtocol`` (``encrypt`` / ``decrypt``)."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def from_env(cls) -> Cipher | None:
        text = settings().aes_key
        return cls(parse_key(text)) if text else None

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        from Crypto.Cipher import AES

        nonce = os.urandom(12)
        aes = AES.new(self._key, AES.MODE_GCM, nonce=nonce)
        body, tag = aes.encrypt_and_digest(plaintext)
        return NAME, nonce + tag + body

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        from Crypto.Cipher import AES

        if ciphername != NAME:
            raise EncryptionKeyError(
                f"data encrypted with {ciphername!r}, which onward does not know; it was not "
                "written by onward"
            )
        nonce, tag, body = ciphertext[:12], ciphertext[12:28], ciphertext[28:]
        try:
            aes = AES.new(self._key, AES.MODE_GCM, nonce=nonce)
            return bytes(aes.decrypt_and_verify(body, tag))
        except ValueError:
            raise EncryptionKeyError(
                f"cannot decrypt: {KEY_ENV} is not the key this data was encrypted with, or the "
                "data was changed. Set the store's key; nothing was read or written"
            ) from None

    def seal(self, data: bytes) -> bytes:
        return self.encrypt(data)[1]

    def open(self, data: bytes) -> bytes:
        return self.decrypt(NAME, data)

    def seal_text(self, text: str) -> str:
        return _PREFIX + base64.b64encode(self.seal(text.encode())).decode()


def open_text(cipher: Cipher | None, text: str) -> str:
    """A column value written by :meth:`Cipher.seal_text`, or plain text as it is."""
    if not text.startswith(_PREFIX):
        return text
    if cipher is None:
        raise EncryptionKeyError(
            f"this store's data is encrypted; set {KEY_ENV} to its key and run again"
        )
    return cipher.open(base64.b64decode(text[len(_PREFIX) :])).decode()


def seal_text(cipher: Cipher | None, text: str) -> str:
    return text if cipher is None else cipher.seal_text(text)


KEY_CHECK = "onward key check"
"""What an encrypted store seals at creation (``onward_meta.key_check``)."""


def check_key(cipher: Cipher | None, sealed: str | None, where: str) -> None:
    """A store's recorded key check (``sealed``; None: not encrypted yet) against the
    key we have: a missing or wrong key fails here, before anything is read or written."""
    if sealed is None:
        return
    if cipher is None:
        raise EncryptionKeyError(
            f"the store {where} is encrypted; set {KEY_ENV} to its key and run again"
        )
    try:
        ok = open_text(cipher, sealed) == KEY_CHECK
    except EncryptionKeyError:
        ok = False
    if not ok:
        raise EncryptionKeyError(
            f"{KEY_ENV} is not the key the store {where} was encrypted with; set the "
            "right key. Nothing was read or written"
        )
