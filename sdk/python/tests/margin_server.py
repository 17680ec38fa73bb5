"""Real `margin` servers for the tests, as web-tests/lib/server.mjs starts
them: a fresh temporary data folder (SQLite), a free loopback port, accounts
made with the CLI, readiness by polling GET /healthz; plus a loopback TCP
proxy that cuts links or silently drops what the server sends, the way a
network does."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]


def margin_bin() -> Path:
    """$MARGIN_BIN, else debug/margin under $CARGO_TARGET_DIR or the repository's target/."""
    if os.environ.get("MARGIN_BIN"):
        binary = Path(os.environ["MARGIN_BIN"]).resolve()
    else:
        target = REPO / os.environ.get("CARGO_TARGET_DIR", "target")
        binary = target / "debug" / "margin"
    if not binary.exists():
        raise RuntimeError(
            f"margin binary not found at {binary}; build it with `cargo build -p margin-server --bin margin` or set MARGIN_BIN"
        )
    return binary


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class MarginServer:
    """One `margin serve` on its own data folder."""

    def __init__(self) -> None:
        self.bin = margin_bin()
        self.dir = Path(tempfile.mkdtemp(prefix="margin-py-test-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tokens: dict[str, str] = {}
        self.log = self.dir / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.bin), *args, "--data", str(self.data)], capture_output=True, text=True, timeout=30
        )
        if done.returncode != 0:
            raise RuntimeError(f"`margin {' '.join(args)}` failed: {done.stderr}")
        return done.stdout

    def add_account(self, name: str) -> str:
        lines = [line.strip() for line in self.cli("account", "add", name).splitlines() if line.strip()]
        self.tokens[name] = lines[-1]
        return lines[-1]

    def pair(self, account: str, name: str, credential_file: Path) -> None:
        """`margin machine pair ACCOUNT NAME --credential-file FILE`."""
        self.cli("machine", "pair", account, name, "--credential-file", str(credential_file))

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [str(self.bin), "serve", "--data", str(self.data), "--listen", f"127.0.0.1:{self.port}"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited during startup:\n{self.logs()}")
            try:
                status, body = self.api("GET", "/healthz")
                if status == 200 and body.get("status") == "ok":
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the server did not start:\n{self.logs()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-20000:] if self.log.exists() else ""

    def api(self, method: str, path: str, *, as_: str | None = None, body: Any = None) -> tuple[int, Any]:
        """A JSON HTTP call (blocking); returns (status, body)."""
        headers = {}
        if as_ is not None:
            headers["Authorization"] = f"Bearer {self.tokens[as_]}"
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                text = response.read()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as error:
            text = error.read()
            return error.code, json.loads(text) if text else None

    def document_with(self, title: str, paragraphs: list[str]) -> str:
        """A document owned by alice holding `paragraphs`; returns its id."""
        status, doc = self.api("POST", "/documents", as_="alice", body={"title": title})
        assert status == 201, doc
        tools = f"/documents/{doc['id']}/tools"
        status, read = self.api("POST", f"{tools}/read_document", as_="alice", body={})
        assert status == 200, read
        edits = [{"op": "insert", "kind": "paragraph", "text": text} for text in paragraphs]
        status, edited = self.api("POST", f"{tools}/edit_plan", as_="alice", body={"revision": read["revision"], "edits": edits})
        assert status == 200, edited
        return doc["id"]

    def say(self, doc: str, text: str) -> None:
        status, body = self.api("POST", f"/documents/{doc}/chat", as_="alice", body={"text": text})
        assert status == 201, body

    def replies(self, doc: str) -> list[str]:
        """The Planner's lines in the document's Chat."""
        status, body = self.api("GET", f"/documents/{doc}/chat", as_="alice")
        assert status == 200, body
        return [m["text"] for m in body["messages"] if m["kind"] == "planner"]

    def planner(self, doc: str) -> dict[str, Any]:
        return self.api("GET", f"/documents/{doc}/planner", as_="alice")[1]


async def wait_for(check: Any, timeout: float = 10.0, what: str = "condition") -> Any:
    """Polls `check` (blocking calls run in a thread) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(check)
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {last!r}")


class Proxy:
    """A TCP proxy on loopback between a machine and a server. `cut()` ends
    every connection through it (no close frame reaches either side);
    `hold_down()` silently drops, from now on, what the server sends on the
    connections open now."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.pairs: list[dict[str, Any]] = []
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def cut(self) -> None:
        for pair in self.pairs:
            for writer in (pair["client"], pair["server"]):
                writer.transport.abort()
        self.pairs.clear()

    def hold_down(self) -> None:
        for pair in self.pairs:
            pair["down_held"] = True

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_writer.transport.abort()
            return
        self.accepted += 1
        pair = {"client": client_writer, "server": server_writer, "down_held": False}
        self.pairs.append(pair)
        await asyncio.gather(
            self._pump(client_reader, server_writer, pair, None),
            self._pump(server_reader, client_writer, pair, "down_held"),
            return_exceptions=True,
        )

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pair: dict[str, Any], held: str | None) -> None:
        try:
            while data := await reader.read(65536):
                if held is not None and pair[held]:
                    continue
                writer.write(data)
                await writer.drain()
        finally:
            writer.transport.abort()
