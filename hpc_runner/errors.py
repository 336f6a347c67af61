"""Errors that reach the user as one paragraph and exit code 2."""

from __future__ import annotations

EXIT_USAGE = 2


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "?", "!", "...")) else text + "."


class UserError(Exception):
    """Bad input from the user: printed as one paragraph, no traceback, exit code 2.

    ``where`` names the file (and line) and ``id_path`` the config id concerned; ``expected``
    says what was wanted. Every field is optional; the message is the one required part.
    """

    exit_code = EXIT_USAGE

    def __init__(
        self,
        message: str,
        *,
        where: str | None = None,
        id_path: str | None = None,
        expected: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.where = where
        self.id_path = id_path
        self.expected = expected
        self.hint = hint

    def paragraph(self) -> str:
        """Return the error as the single paragraph printed to the user."""
        parts = []
        if self.where:
            parts.append(f"{self.where}:")
        if self.id_path:
            parts.append(f"at id '{self.id_path}':")
        parts.append(_sentence(self.message))
        if self.expected:
            parts.append(_sentence(f"Expected {self.expected}"))
        if self.hint:
            parts.append(_sentence(self.hint))
        return " ".join(parts)

    def __str__(self) -> str:
        return self.paragraph()


class ConfigError(UserError):
    """A config file, override or environment value that cannot be used."""


class BundleError(UserError):
    """A bundle that cannot be found, loaded or trusted."""


class ClusterError(UserError):
    """A cluster profile, sweep spec or scheduler answer that cannot be used."""
