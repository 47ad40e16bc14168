"""The query server's client, on the standard library alone: hand a plain `tracehouse sql` to a warm
query server (tracehouse.serve) before anything heavy is imported (tracehouse.launch calls
`ask_server` first), and start a server in the background (`start_server`).

A `sql` process pays ~0.2 s before its query runs: `import duckdb` (0.09-0.15 s: its Python layer and
importlib.metadata), click, and a new DuckDB database attaching the catalogue. A query server has paid
that once; this module talks to it with the standard library only (socket, json), so a question costs
Python's start, one round trip, and the query.

What is handed over: `tracehouse [--warehouse W] sql [--format F] [QUERY | - | <stdin]` and nothing
else (any other option or command, --help, --engine, --debug: the CLI runs it). The server answers
exactly what the CLI would print (it renders with the CLI's own code) or says `fallback`, and the CLI
runs the command itself: a server that is not running, busy starting, of another version of the code
or settings (the socket's name is derived from them: `identity`), or any error of the exchange. So the
server can only make an answer faster, never different.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
# what a server's answers depend on besides the warehouse: the code and SQL it runs, the interpreter,
# and the settings the catalogue reads (the user's rule files, the catalogue cache, the time zone)
CODE_GLOBS = ("tracehouse/*.py", "warehouse/*.py", "sql/**/*.sql", "sql/rules/*")
SETTINGS_ENVS = (
    "TRACEHOUSE_CACHE",
    "XDG_CACHE_HOME",
    "TRACEHOUSE_SITE_RULES",
    "TRACEHOUSE_DEVICE_PEAKS",
    "TZ",
)
SERVE_ENV = "TRACEHOUSE_SERVE"  # "off": never use nor start a query server
PROTOCOL = 1


def serving_enabled() -> bool:
    """TRACEHOUSE_SERVE is not off, and the platform has Unix sockets and user ids (not Windows)."""
    if not (hasattr(socket, "AF_UNIX") and hasattr(os, "getuid")):
        return False
    return os.environ.get(SERVE_ENV, "").strip().lower() not in ("off", "0", "no", "false")


def seconds_env(name: str, default: float) -> float:
    """A number of seconds from the environment (TRACEHOUSE_SERVE_IDLE, TRACEHOUSE_DERIVE_DELAY), at least
    0; the default when unset or not a number."""
    try:
        return max(0.0, float(os.environ.get(name) or default))
    except ValueError:
        return default


def identity() -> str:
    """A digest of the code, the interpreter and the settings a server's answers depend on: a server
    serves the clients of its own identity only (the socket is named after it), so editing a view or
    setting a rule file never reaches an old server."""
    digest = hashlib.sha256(f"{PROTOCOL}\0{sys.executable}\0".encode())
    for pattern in CODE_GLOBS:
        for path in sorted(PACKAGE_ROOT.glob(pattern)):
            try:
                stat = path.stat()
            except OSError:
                continue
            digest.update(f"{path.relative_to(PACKAGE_ROOT)}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    for name in SETTINGS_ENVS:
        value = os.environ.get(name)
        digest.update(f"{name}={value}\0".encode())
        if value and name in ("TRACEHOUSE_SITE_RULES", "TRACEHOUSE_DEVICE_PEAKS"):
            try:
                stat = os.stat(value)
                digest.update(f"{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
            except OSError:
                pass
    return digest.hexdigest()[:20]


def socket_dir() -> Path:
    """A folder only this user can enter (a socket path must be short: /tmp, not the cache folder)."""
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(os.environ.get("TRACEHOUSE_SERVE_DIR") or f"/tmp/tracehouse-{uid}")


def private_dir() -> Path | None:
    """socket_dir(), created 0700; None when it is not this user's alone (then no server is used)."""
    if not serving_enabled():
        return None
    folder = socket_dir()
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        stat = folder.lstat()
    except OSError:
        return None
    if stat.st_uid != os.getuid() or stat.st_mode & 0o077 or not folder.is_dir() or folder.is_symlink():
        return None
    return folder


def socket_path() -> Path | None:
    folder = private_dir()
    return None if folder is None else folder / f"{identity()}.sock"


def _sql_request(argv: list[str]) -> dict | None:
    """The request for `tracehouse [--warehouse W] sql [--format F] [QUERY|-]`, or None for anything else."""
    warehouse, from_env = os.environ.get("TRACEHOUSE_WAREHOUSE"), True
    args = list(argv)
    while args and args[0] != "sql":
        option = args.pop(0)
        if option == "--warehouse" and args:
            warehouse, from_env = args.pop(0), False
        elif option.startswith("--warehouse="):
            warehouse, from_env = option.split("=", 1)[1], False
        else:
            return None
    if not args:
        return None
    args.pop(0)
    fmt, query = "table", None
    while args:
        item = args.pop(0)
        if item == "--format" and args:
            fmt = args.pop(0)
        elif item.startswith("--format="):
            fmt = item.split("=", 1)[1]
        elif item == "--":
            if len(args) != 1 or query is not None:
                return None
            query = args.pop(0)
        elif item.startswith("-") and item != "-":
            return None
        elif query is None:
            query = item
        else:
            return None
    if fmt not in ("table", "csv", "json"):
        return None
    if warehouse is None:
        warehouse, from_env = "./tracehouse-data", False
    return {
        "protocol": PROTOCOL,
        "warehouse": os.path.abspath(warehouse),
        "warehouse_from_env": from_env,
        "fmt": fmt,
        "query": None if query in (None, "-") else query,
        "color": sys.stdout is not None and sys.stdout.isatty(),  # as click.echo would print it here
    }


def ask_server(argv: list[str]) -> int | None:
    """Answer `tracehouse sql ...` through a warm query server: the exit code, or None when the CLI must
    run the command itself (also when stdin was read: it is put back for the CLI)."""
    if not serving_enabled():
        return None
    request = _sql_request(argv)
    if request is None:
        return None
    if request["query"] is None:
        if sys.stdin is None or sys.stdin.isatty():
            return None  # the CLI says what is missing
        script = sys.stdin.read()
        import io

        sys.stdin = io.StringIO(script)  # the CLI reads the same script if the server does not answer
        request["script"] = script
    path = socket_path()
    if path is None or not path.exists():
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(1.0)  # to connect: a live server accepts at once
            conn.connect(str(path))
            conn.settimeout(None)  # the query takes what it takes
            conn.sendall(json.dumps(request).encode() + b"\n")
            conn.shutdown(socket.SHUT_WR)
            reply = json.loads(read_all(conn))
    except (OSError, ValueError):
        return None
    if not isinstance(reply, dict) or "code" not in reply:
        return None  # fallback: the server declined
    try:
        sys.stdout.write(reply.get("stdout", ""))
        sys.stdout.flush()
    except (OSError, ValueError):  # a closed pipe (`| head`)
        return 1
    if reply.get("stderr"):
        sys.stderr.write(reply["stderr"])
        sys.stderr.flush()
    return int(reply["code"])


def read_all(conn: socket.socket) -> bytes:
    parts = []
    while True:
        chunk = conn.recv(1 << 20)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)


def lock_path(path: Path) -> Path:
    return path.with_suffix(".lock")


def server_running(path: Path) -> bool:
    """Whether a server of this identity holds its lock (it does while it lives)."""
    import fcntl

    try:
        fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return True  # cannot tell: do not start another
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops the lock taken just now
    return False


def start_server() -> None:
    """Start a query server in the background (detached, its log in socket_dir()/serve.log) unless one
    of this identity is running or TRACEHOUSE_SERVE=off. It leaves after TRACEHOUSE_SERVE_IDLE seconds
    (default 600) without a question."""
    import subprocess

    if not serving_enabled():
        return
    path = socket_path()
    if path is None or server_running(path):
        return
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
    try:
        with open(path.parent / "serve.log", "ab") as log:
            subprocess.Popen(
                [sys.executable, "-c", "from tracehouse.serve import main; main()"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
                cwd="/",
            )
    except OSError:
        pass  # no server: every question is answered in its own process, as without one
