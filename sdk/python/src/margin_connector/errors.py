"""The SDK's errors: why a link could not be opened (ConnectError) and why a
tool call gave no output (ToolError).

Each says what failed and why, in the words the Rust and TypeScript SDKs use,
and carries what a caller acts on: a kind, and the server's code.
"""

from __future__ import annotations

from typing import Any, Literal

ConnectErrorKind = Literal[
    "address",  # the server address is not http(s):// or ws(s)://
    "credential",  # the credential cannot go in a header
    "refused",  # the server refused the upgrade (`status`, and for a 401 `code`)
    "credential-file",  # the credential file could not be read
    "empty-credential-file",  # the credential file holds no credential
    "network",  # the connection failed
    "hello",  # the server answered `hello` with a refusal (`code`)
    "no-welcome",  # the server closed or said something else instead of `welcome`
]


class MarginError(Exception):
    """Every error this SDK raises."""


class ConnectError(MarginError):
    """Why a link could not be opened."""

    def __init__(
        self,
        kind: ConnectErrorKind,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        path: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        # The HTTP status of a refused upgrade.
        self.status = status
        # A refused upgrade's error code (`unauthenticated`, `machine_revoked`,
        # `credential_expired`), or a refused `hello`'s refusal code.
        self.code = code
        # The credential file, for the credential-file kinds.
        self.path = path

    @classmethod
    def address(cls, server: str) -> ConnectError:
        return cls("address", f"server address {server!r} must start with http://, https://, ws:// or wss://")

    @classmethod
    def credential(cls) -> ConnectError:
        return cls("credential", "the credential is not a valid header value")

    @classmethod
    def refused(cls, status: int, code: str | None, message: str) -> ConnectError:
        return cls(
            "refused",
            f"the server refused the link with HTTP {status} ({code or 'no code'}): {message}",
            status=status,
            code=code,
        )

    @classmethod
    def credential_file(cls, path: str, why: str) -> ConnectError:
        return cls("credential-file", f"cannot read the credential file {path}: {why}", path=path)

    @classmethod
    def empty_credential_file(cls, path: str) -> ConnectError:
        return cls(
            "empty-credential-file",
            f"the credential file {path} is empty; write the machine's credential (mgm_…) into it",
            path=path,
        )

    @classmethod
    def network(cls, why: str) -> ConnectError:
        return cls("network", f"cannot reach the server: {why}")

    @classmethod
    def hello(cls, code: str, message: str) -> ConnectError:
        return cls("hello", f"the server refused hello ({code}): {message}", code=code)

    @classmethod
    def no_welcome(cls, why: str) -> ConnectError:
        return cls("no-welcome", f"the server did not welcome the machine: {why}")

    @property
    def final(self) -> bool:
        """Whether trying again cannot help: the address, credential or `hello`
        is wrong, not the network. A missing credential file may yet be written."""
        if self.kind in ("address", "credential", "hello"):
            return True
        if self.kind == "refused":
            return self.status in (401, 403, 404)
        return False


ToolErrorKind = Literal[
    "refused",  # the server refused the call (`refusal`); nothing changed
    "link-closed",  # the link closed before the result came, and will not bring it
    "output",  # the result did not have the tool's output shape
    "aborted",  # the turn was stopped or superseded: the SDK sends nothing more for it
    "too-large",  # the message would be over the 1 MiB a machine's frame may carry
]


class ToolError(MarginError):
    """Why a tool call (or a run report) gave no output."""

    def __init__(self, kind: ToolErrorKind, message: str, refusal: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        # The server's refusal (a ToolRefusal), for kind `refused`.
        self.refusal = refusal

    @classmethod
    def refused(cls, refusal: dict[str, Any]) -> ToolError:
        return cls("refused", f"refused ({refusal.get('code')}): {refusal.get('message')}", refusal)

    @classmethod
    def link_closed(cls, why: str = "the link closed before the result came") -> ToolError:
        return cls("link-closed", why)

    @classmethod
    def output(cls, why: str) -> ToolError:
        return cls("output", f"unreadable tool output: {why}")

    @classmethod
    def aborted(cls, why: str) -> ToolError:
        return cls("aborted", why)

    @classmethod
    def too_large(cls, what: str, size: int, limit: int) -> ToolError:
        return cls("too-large", f"{what} would be a {size}-byte frame; a machine's frames carry at most {limit}")

    @property
    def code(self) -> str | None:
        """The refusal's code (`stale_revision`, `interrupted`, …), if refused."""
        return None if self.refusal is None else self.refusal.get("code")


def is_refusal(error: BaseException, code: str | None = None) -> bool:
    """Whether `error` is the server refusing a call, with `code` if given."""
    return isinstance(error, ToolError) and error.kind == "refused" and (code is None or error.code == code)
