"""The query server: a long-lived reader that answers `tracehouse sql` for its clients
(tracehouse.client), so that a question costs its query and not a process's imports and catalogue.

    tracehouse serve                 # in the foreground (started in the background by `sql` and `ingest`)
    tracehouse serve --stop          # stop the running one
    TRACEHOUSE_SERVE=off             # never start nor use one

One process per user and identity (the code, the interpreter and the settings its answers depend on:
client.identity), listening on a Unix socket in a folder only the user can enter. It holds one
warehouse.session.Session per warehouse asked about (the catalogue attached once, the kept rows seen
again before each question, as a `tracehouse shell` does), answers each question on a thread of its
own, and leaves after TRACEHOUSE_SERVE_IDLE seconds (default 600) without one.

It answers exactly what the CLI prints, rendered by the CLI's own code (tracehouse.output.print_answers,
error_line), or declines (`fallback`) and the client's CLI runs the command itself: a warehouse that does
not exist, a script with no statement, a warehouse busy with another client's question, anything
unexpected. Queries are checked and run read-only exactly as `sql` runs them (warehouse.query).
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

from tracehouse import client

IDLE_ENV = "TRACEHOUSE_SERVE_IDLE"
DEFAULT_IDLE_S = 600.0
MAX_SESSIONS = 4  # warehouses held at once (the least recently asked is closed first)


class Server:
    def __init__(self, path: Path, idle_s: float) -> None:
        self.path = path
        self.idle_s = idle_s
        self.sessions: dict[str, tuple] = {}  # warehouse root -> (Session, its lock), most recent last
        self.guard = threading.Lock()
        self.last = time.monotonic()
        self.stopping = False

    def session(self, root: str):
        """The warehouse's (Session, lock), opened on first use; None when there is no warehouse."""
        from warehouse.session import Session
        from warehouse.store import Warehouse

        store = Warehouse(root)
        with self.guard:
            held = self.sessions.pop(root, None)
            if held is not None and not store.exists():
                held[0].close()
                held = None
            if held is None:
                if not store.exists():
                    return None
                held = (Session(store), threading.Lock())
            self.sessions[root] = held
            while len(self.sessions) > MAX_SESSIONS:
                oldest = next(iter(self.sessions))
                session, lock = self.sessions.pop(oldest)
                if lock.acquire(blocking=False):
                    session.close()
                    lock.release()
            return held

    def answer(self, request: dict) -> dict:
        """{stdout, stderr, code} as the CLI would print them, or {fallback: why}."""
        from tracehouse.errors import TracehouseError
        from tracehouse.output import error_line, print_answers
        from warehouse.query import check_read_only
        from warehouse.session import split_statements

        if request.get("stop"):
            self.stopping = True
            return {"stopped": os.getpid()}
        if request.get("protocol") != client.PROTOCOL or request.get("fmt") not in ("table", "csv", "json"):
            return {"fallback": "request"}
        try:
            held = self.session(str(request.get("warehouse")))
        except Exception as exc:  # noqa: BLE001 - a warehouse it cannot open: the CLI says why
            return {"fallback": f"{type(exc).__name__}: {exc}"}
        if held is None:
            return {"fallback": "no warehouse"}
        session, lock = held
        if not lock.acquire(blocking=False):
            return {"fallback": "busy"}  # the client answers in its own process, beside the other question
        out, err, code = io.StringIO(), io.StringIO(), 0
        try:
            color = bool(request.get("color"))
            if request.get("query") is not None:
                queries = [request["query"]]
            else:
                queries = split_statements(request.get("script") or "", session.con)
                if not queries:
                    return {"fallback": "no statement"}  # the CLI's usage error
            try:
                for text in queries:
                    check_read_only(text, session.con)
                session.refresh()
                print_answers(session.con, queries, request["fmt"], file=out, color=color)
            except TracehouseError as exc:
                print(error_line(exc), file=err)
                code = 1
        except Exception as exc:  # noqa: BLE001 - anything else: the CLI runs it and says what happened
            return {"fallback": f"{type(exc).__name__}: {exc}"}
        finally:
            lock.release()
        return {"stdout": out.getvalue(), "stderr": err.getvalue(), "code": code}

    def handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = json.loads(client.read_all(conn) or b"{}")
                reply = self.answer(request) if isinstance(request, dict) else {"fallback": "request"}
                conn.sendall(json.dumps(reply).encode())
            except (OSError, ValueError):
                pass  # the client left, or sent nothing a server reads: it answers itself
            finally:
                self.last = time.monotonic()

    def serve(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.path.unlink(missing_ok=True)  # a dead server's socket (its lock is ours now)
        old_mask = os.umask(0o177)
        try:
            listener.bind(str(self.path))
        finally:
            os.umask(old_mask)
        listener.listen(64)
        listener.settimeout(1.0)
        own = self.path.stat().st_ino
        try:
            while not self.stopping:
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    try:
                        if self.path.stat().st_ino != own:
                            return  # replaced: another server answers now
                    except OSError:
                        return  # removed: leave
                    if time.monotonic() - self.last > self.idle_s and not self._busy():
                        return
                    continue
                self.last = time.monotonic()
                threading.Thread(target=self.handle, args=(conn,), daemon=True).start()
        finally:
            listener.close()
            try:
                if self.path.stat().st_ino == own:
                    self.path.unlink()
            except OSError:
                pass

    def _busy(self) -> bool:
        with self.guard:
            return any(lock.locked() for _, lock in self.sessions.values())


def run(idle_s: float | None = None) -> int:
    """Serve until idle; 0 also when another server of this identity is running (it answers)."""
    if not client.serving_enabled():
        print(
            "tracehouse serve: TRACEHOUSE_SERVE is off (or this platform has no Unix sockets)",
            file=sys.stderr,
        )
        return 1
    path = client.socket_path()
    if path is None:
        print(
            f"tracehouse serve: {client.socket_dir()} is not this user's alone: not serving", file=sys.stderr
        )
        return 1
    lock = os.open(client.lock_path(path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock)
        return 0
    os.ftruncate(lock, 0)
    os.write(lock, f"{os.getpid()}\n".encode())  # who serves (a benchmark counts its CPU time)
    try:
        # what every answer needs, imported before the socket exists: a client finding the socket finds
        # a server ready to answer
        import tracehouse.output  # noqa: F401
        import warehouse.session  # noqa: F401

        Server(path, client.seconds_env(IDLE_ENV, DEFAULT_IDLE_S) if idle_s is None else idle_s).serve()
    finally:
        os.close(lock)
    return 0


def stop() -> bool:
    """Ask the running server of this identity to leave; whether one was running."""
    path = client.socket_path()
    if path is None or not path.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5.0)
            conn.connect(str(path))
            conn.sendall(json.dumps({"stop": True}).encode())
            conn.shutdown(socket.SHUT_WR)
            return "stopped" in json.loads(client.read_all(conn) or b"{}")
    except (OSError, ValueError):
        return False


def main() -> None:
    """The background server's process (client.start_server)."""
    os._exit(run())
