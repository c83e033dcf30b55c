#!/usr/bin/env python3
"""Ingest benchmark: weir and PostgreSQL 15 side by side.

Starts a scratch PostgreSQL 15 cluster and a weir node, each in its own
temporary directory on free local ports, and measures on both:

  copy      bulk load of --copy-rows rows (default --rows) with
            `COPY t FROM STDIN` (text format); reports the server's peak
            resident memory (VmHWM) once the COPY is done
  insert    single-row parameterised INSERTs (extended protocol, autocommit)
            from 1 connection for --insert-seconds
  insert-N  the same from --concurrency connections (one thread each)

Every measurement is repeated --repeat times, alternating the systems
(weir, pg, weir, pg, ...), and the median of each system is reported together
with the ratio weir / PostgreSQL. Peak memory of both servers is recorded.
The result is a Markdown section on stdout, ready for docs/benchmarks/log.md;
progress goes to stderr; --json writes every individual run as well.

PostgreSQL runs with initdb defaults, which include full durability
(fsync = on, synchronous_commit = on). When the script runs as root the
cluster is created and run as an unprivileged user (--pg-user, default
`postgres`; created as a system user if it does not exist), because initdb
and postgres refuse to run as root.

Requirements: Python 3.9+, psycopg 3 (`pip install "psycopg[binary]"`),
PostgreSQL 15 server binaries (Debian: `apt-get install postgresql-15`) and a
release build of weir (`cargo build --release`).

Examples:
  python3 benches/ingest.py                                  # full run
  python3 benches/ingest.py --rows 20000 --insert-seconds 2 --repeat 1 --skip-weir
  python3 benches/ingest.py --json target/ingest.json > target/ingest.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pwd
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field

try:
    import psycopg
    from psycopg.types.numeric import Int8
except ImportError:  # reported in main() so that --help works without it
    psycopg = None

DEFAULT_TARGET_DIR = os.environ.get("CARGO_TARGET_DIR") or os.path.expanduser("~/.cache/weir-target")
DEFAULT_WEIR_BIN = os.path.join(DEFAULT_TARGET_DIR, "release", "weir")
DEFAULT_PG_BIN_DIR = "/usr/lib/postgresql/15/bin"

PHASES = ("copy", "insert", "insert-concurrent")

CITIES = (
    "Amsterdam", "Berlin", "Boston", "Cairo", "Chicago", "Delhi", "Dublin", "Helsinki",
    "Lagos", "Lima", "Lisbon", "London", "Madrid", "Montreal", "Mumbai", "Nairobi",
    "Oslo", "Paris", "Prague", "Rome", "Santiago", "Seoul", "Sydney", "Tokyo",
    "Toronto", "Vienna", "Warsaw", "Zurich",
)

INSERT_SQL = "INSERT INTO {table} (id, name, city, price) VALUES (%s, %s, %s, %s)"


def log(msg: str) -> None:
    print(f"[ingest] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# /proc helpers (Linux only)
# --------------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _read(path: str) -> str | None:
    try:
        with open(path, "r") as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def proc_status_kib(pid: int) -> dict[str, int]:
    """The kB-valued fields of /proc/PID/status (VmHWM, VmRSS, ...)."""
    text = _read(f"/proc/{pid}/status")
    out: dict[str, int] = {}
    if text is None:
        return out
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            out[key] = int(parts[0])
    return out


def reset_peak(pid: int | str) -> None:
    """Start VmHWM afresh (Linux: 5 > clear_refs) so that a peak is per run."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def proc_pss_kib(pid: int) -> int | None:
    """Proportional set size: private pages plus a fair share of shared ones."""
    text = _read(f"/proc/{pid}/smaps_rollup")
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return None


def _stat_fields(pid: int) -> list[str] | None:
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    # The command name is in parentheses and may contain spaces.
    return text[text.rfind(")") + 2:].split()


def alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def descendants(root: int) -> list[int]:
    """All live descendants of root, found through the ppid of every process."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is None:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def tree_cpu_seconds(root: int) -> float:
    """CPU time of root (including reaped children) plus its live descendants."""
    fields = _stat_fields(root)
    if fields is None:
        return float("nan")
    # fields[0] is field 3 (state) of proc(5): utime=14, stime=15, cutime=16, cstime=17.
    ticks = sum(int(x) for x in fields[11:15])
    for pid in descendants(root):
        f = _stat_fields(pid)
        if f is not None:
            ticks += int(f[11]) + int(f[12])
    return ticks / CLK_TCK


class MemorySampler(threading.Thread):
    """Samples the memory of a process tree (a server and its children).

    At every sample it sums PSS over the tree (shared memory such as
    PostgreSQL's shared_buffers is counted once) and VmHWM over the live
    processes (shared memory counted once per process that touched it) and
    keeps the maxima, overall and per phase.
    """

    def __init__(self, root_pid: int, interval: float):
        super().__init__(daemon=True, name=f"mem-{root_pid}")
        self.root = root_pid
        self.interval = interval
        self.phase = "startup"
        self.peak_pss_kib = 0
        self.peak_sum_hwm_kib = 0
        self.peak_procs = 0
        self.phase_peak_pss_kib: dict[str, int] = {}
        self._stop_evt = threading.Event()
        self._lock = threading.Lock()

    def sample(self) -> None:
        pids = [self.root] + descendants(self.root)
        pss_total = hwm_total = live = 0
        for pid in pids:
            st = proc_status_kib(pid)
            if not st:
                continue
            live += 1
            hwm_total += st.get("VmHWM", 0)
            pss = proc_pss_kib(pid)
            pss_total += pss if pss is not None else st.get("VmRSS", 0)
        with self._lock:
            self.peak_pss_kib = max(self.peak_pss_kib, pss_total)
            self.peak_sum_hwm_kib = max(self.peak_sum_hwm_kib, hwm_total)
            self.peak_procs = max(self.peak_procs, live)
            prev = self.phase_peak_pss_kib.get(self.phase, 0)
            self.phase_peak_pss_kib[self.phase] = max(prev, pss_total)

    def set_phase(self, phase: str) -> None:
        with self._lock:
            self.phase = phase
        self.sample()

    def run(self) -> None:
        while not self._stop_evt.wait(self.interval):
            try:
                self.sample()
            except Exception:  # a process vanished mid-read; next sample will do
                pass

    def stop(self) -> None:
        self._stop_evt.set()
        if self.is_alive():
            self.join(timeout=5)


# --------------------------------------------------------------------------
# Servers
# --------------------------------------------------------------------------


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tail(path: str, lines: int = 30) -> str:
    text = _read(path) or ""
    return "\n".join(text.splitlines()[-lines:])


class WeirNode:
    """A weir node over its own data directory, started and stopped whole
    (the Nexmark and end-to-end harnesses build on it)."""

    def __init__(self, binary: str, data_dir: str, log_path: str, extra_args: tuple = ()):
        self.binary, self.data_dir, self.log_path = binary, data_dir, log_path
        self.extra_args = list(extra_args)
        self.proc: subprocess.Popen | None = None
        self.port = self.http_port = 0

    def start(self, timeout: float = 60) -> None:
        self.port, self.http_port = free_ports(2)
        cmd = [self.binary, "serve", "--listen", f"127.0.0.1:{self.port}",
               "--http-listen", f"127.0.0.1:{self.http_port}", "--data-dir", self.data_dir,
               *self.extra_args]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=open(self.log_path, "ab"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + timeout
        while True:
            try:
                with self.connect():
                    return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise SystemExit(f"weir did not start; see {self.log_path}")
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def connect(self):
        return psycopg.connect(f"host=127.0.0.1 port={self.port} user=weir dbname=weir",
                               autocommit=True, connect_timeout=5)

    @staticmethod
    def wait_for_generators(conn, poll: float) -> None:
        """Until every bounded generator source shows `finished`; one that
        failed ends the run."""
        while True:
            states = [row[2] for row in conn.execute("SHOW SOURCES").fetchall()]
            if all(s == "finished" for s in states):
                return
            if any(s.startswith("failed") for s in states):
                raise SystemExit(f"a generator failed: {states}")
            time.sleep(poll)


class Server:
    key = ""  # "weir" or "pg"
    label = ""  # column header
    user = "bench"
    dbname = "bench"

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.workdir: str | None = None
        self.port: int | None = None
        self.sampler: MemorySampler | None = None
        self.version = "unknown"
        self.settings: dict[str, str] = {}

    # -- lifecycle, implemented by subclasses
    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def pid(self) -> int | None:
        raise NotImplementedError

    def log_path(self) -> str:
        raise NotImplementedError

    # Statement that makes acknowledged writes visible to a SELECT, if any.
    flush_sql: str | None = None

    def make_visible(self, conn) -> None:
        if self.flush_sql:
            conn.execute(self.flush_sql)

    # -- shared
    def conninfo(self) -> str:
        return (
            f"host=127.0.0.1 port={self.port} user={self.user} dbname={self.dbname} "
            "sslmode=disable gssencmode=disable application_name=weir-ingest-bench"
        )

    def connect(self, **kw):
        prepare = None if self.args.no_prepare else 5
        return psycopg.connect(self.conninfo(), autocommit=True, prepare_threshold=prepare, **kw)

    def wait_ready(self, timeout: float, is_running) -> None:
        deadline = time.monotonic() + timeout
        last_err: Exception | None = None
        while time.monotonic() < deadline:
            if not is_running():
                raise RuntimeError(
                    f"{self.label} exited during startup; last log lines:\n{tail(self.log_path())}"
                )
            try:
                with psycopg.connect(self.conninfo(), autocommit=True, connect_timeout=2):
                    return
            except psycopg.OperationalError as e:
                last_err = e
                time.sleep(0.2)
        raise RuntimeError(
            f"{self.label} did not accept connections within {timeout:.0f}s ({last_err}); "
            f"last log lines:\n{tail(self.log_path())}"
        )

    def check_alive(self) -> None:
        pid = self.pid()
        if pid is None or not alive(pid):
            raise RuntimeError(f"{self.label} is no longer running; last log lines:\n{tail(self.log_path())}")

    def start_sampler(self) -> None:
        pid = self.pid()
        if pid is not None:
            self.sampler = MemorySampler(pid, self.args.mem_interval)
            self.sampler.sample()
            self.sampler.start()

    def set_phase(self, phase: str) -> None:
        if self.sampler:
            self.sampler.set_phase(phase)

    def cpu_seconds(self) -> float:
        pid = self.pid()
        return tree_cpu_seconds(pid) if pid else float("nan")

    def memory(self) -> dict:
        """Peak memory figures in KiB; call while the server is still up."""
        out: dict = {}
        pid = self.pid()
        if pid:
            out["root_vmhwm_kib"] = proc_status_kib(pid).get("VmHWM")
        if self.sampler:
            self.sampler.sample()
            out["peak_pss_kib"] = self.sampler.peak_pss_kib
            out["peak_sum_vmhwm_kib"] = self.sampler.peak_sum_hwm_kib
            out["peak_processes"] = self.sampler.peak_procs
            out["phase_peak_pss_kib"] = dict(self.sampler.phase_peak_pss_kib)
        return out

    def cleanup_dir(self) -> None:
        if self.workdir and os.path.isdir(self.workdir):
            if self.args.keep:
                log(f"keeping {self.label} directory {self.workdir}")
            else:
                shutil.rmtree(self.workdir, ignore_errors=True)


class WeirServer(Server):
    key = "weir"
    label = "weir"
    user = "weir"
    dbname = "weir"
    flush_sql = "FLUSH"

    def __init__(self, args):
        super().__init__(args)
        self.proc: subprocess.Popen | None = None
        self.http_port: int | None = None
        self._log = None

    def log_path(self) -> str:
        return os.path.join(self.workdir or "", "weir.log")

    def pid(self) -> int | None:
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    def start(self) -> None:
        binary = self.args.weir_bin
        self.workdir = tempfile.mkdtemp(prefix="weir-bench-weir-", dir=self.args.tmp_dir)
        data_dir = os.path.join(self.workdir, "data")
        os.mkdir(data_dir)
        self.port, self.http_port = free_ports(2)
        try:
            out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
            if out.returncode == 0 and out.stdout.strip():
                self.version = out.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
        cmd = [
            binary, "serve",
            "--listen", f"127.0.0.1:{self.port}",
            "--http-listen", f"127.0.0.1:{self.http_port}",
            "--data-dir", data_dir,
            *self.args.weir_arg,
        ]
        log(f"starting weir: {' '.join(cmd)}")
        self._log = open(self.log_path(), "wb")
        # Own session, so that Ctrl-C reaches only this script, which then
        # shuts weir down in order.
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            cwd=self.workdir, start_new_session=True,
        )
        self.wait_ready(self.args.startup_timeout, lambda: self.proc.poll() is None)
        self.settings = {"data_dir": data_dir, "extra_args": " ".join(self.args.weir_arg)}
        try:
            url = f"http://127.0.0.1:{self.http_port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as resp:
                resp.read()
        except Exception as e:  # not fatal for an ingest benchmark
            log(f"warning: weir /metrics on port {self.http_port} did not answer: {e}")
        log(f"weir ready on port {self.port} (pid {self.proc.pid}), log {self.log_path()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                log("weir did not stop within 30s of SIGTERM; sending SIGKILL")
                self.proc.kill()
                self.proc.wait()
        if self._log:
            self._log.close()
            self._log = None


@dataclass
class Creds:
    name: str
    uid: int
    gid: int
    home: str


class PostgresServer(Server):
    key = "pg"
    label = "PostgreSQL 15"
    user = "postgres"
    dbname = "postgres"

    def __init__(self, args):
        super().__init__(args)
        self.bin_dir = args.pg_bin_dir
        self.creds: Creds | None = None
        self.data_dir: str | None = None
        self.postmaster_pid: int | None = None

    def log_path(self) -> str:
        return os.path.join(self.workdir or "", "postgres.log")

    def pid(self) -> int | None:
        if self.postmaster_pid and alive(self.postmaster_pid):
            return self.postmaster_pid
        return None

    # -- running PostgreSQL's tools as an unprivileged user when we are root
    def _resolve_user(self) -> Creds | None:
        if os.geteuid() != 0:
            return None
        name = self.args.pg_user
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            log(f"creating system user {name!r} to run PostgreSQL (initdb refuses to run as root)")
            useradd = shutil.which("useradd") or "/usr/sbin/useradd"
            res = subprocess.run(
                [useradd, "--system", "--user-group", "--no-create-home",
                 "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name],
                capture_output=True, text=True,
            )
            if res.returncode != 0:
                raise RuntimeError(f"could not create user {name!r}: {res.stderr.strip()}; pass --pg-user")
            pw = pwd.getpwnam(name)
        if pw.pw_uid == 0:
            raise RuntimeError(f"--pg-user {name!r} has uid 0; PostgreSQL needs an unprivileged user")
        return Creds(name, pw.pw_uid, pw.pw_gid, pw.pw_dir)

    def _run(self, cmd: list[str], timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C")
        kw: dict = {}
        if self.creds:
            env.update(HOME=self.workdir, USER=self.creds.name, LOGNAME=self.creds.name)
            # Drop to the user's uid, gid and no supplementary groups; this is
            # what `runuser -u USER --` does, without depending on util-linux.
            kw = dict(user=self.creds.uid, group=self.creds.gid, extra_groups=[])
        res = subprocess.run(
            cmd, env=env, cwd=self.workdir, capture_output=True, text=True,
            timeout=timeout, stdin=subprocess.DEVNULL, **kw,
        )
        if check and res.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd)} failed with exit code {res.returncode}:\n{res.stdout}{res.stderr}"
            )
        return res

    def start(self) -> None:
        initdb = os.path.join(self.bin_dir, "initdb")
        pg_ctl = os.path.join(self.bin_dir, "pg_ctl")
        for tool in (initdb, pg_ctl):
            if not os.access(tool, os.X_OK):
                raise RuntimeError(
                    f"{tool} not found; install PostgreSQL 15 (apt-get install postgresql-15) "
                    "or pass --pg-bin-dir"
                )
        self.creds = self._resolve_user()
        self.workdir = tempfile.mkdtemp(prefix="weir-bench-pg-", dir=self.args.tmp_dir)
        if self.creds:
            os.chown(self.workdir, self.creds.uid, self.creds.gid)
            probe = self._run(["test", "-w", self.workdir], check=False)
            if probe.returncode != 0:
                raise RuntimeError(
                    f"user {self.creds.name!r} cannot write to {self.workdir}: a parent directory "
                    "is not accessible to it; pass --tmp-dir /tmp (or another world-searchable directory)"
                )
        self.data_dir = os.path.join(self.workdir, "data")
        self.port = free_ports(1)[0]
        self.version = self._run([os.path.join(self.bin_dir, "postgres"), "--version"]).stdout.strip()

        log(f"initdb {self.data_dir}" + (f" as user {self.creds.name}" if self.creds else ""))
        # --no-sync only skips initdb's own final fsync of the fresh cluster;
        # the server itself runs with fsync = on.
        self._run([initdb, "-D", self.data_dir, "-U", "postgres", "--auth=trust",
                   "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"])
        max_conn = max(100, self.args.concurrency + 10)
        with open(os.path.join(self.data_dir, "postgresql.conf"), "a") as f:
            f.write(
                "\n# weir ingest benchmark\n"
                f"port = {self.port}\n"
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.workdir}'\n"
                f"max_connections = {max_conn}\n"
                "# durability: the defaults, spelled out\n"
                "fsync = on\n"
                "synchronous_commit = on\n"
                "full_page_writes = on\n"
            )
        log(f"starting PostgreSQL on port {self.port}")
        self._run([pg_ctl, "-D", self.data_dir, "-l", self.log_path(), "-w", "-t", "60", "start"], timeout=90)
        pidfile = _read(os.path.join(self.data_dir, "postmaster.pid")) or ""
        self.postmaster_pid = int(pidfile.splitlines()[0]) if pidfile.strip() else None
        self.wait_ready(self.args.startup_timeout, lambda: self.pid() is not None)
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            for name in ("server_version", "shared_buffers", "fsync", "synchronous_commit",
                         "wal_level", "full_page_writes", "max_wal_size", "wal_sync_method"):
                self.settings[name] = conn.execute(f"SHOW {name}").fetchone()[0]
        self.version = f"PostgreSQL {self.settings['server_version']}"
        log(f"PostgreSQL ready (postmaster pid {self.postmaster_pid}), log {self.log_path()}")

    def stop(self) -> None:
        if not self.data_dir or self.pid() is None:
            return
        pg_ctl = os.path.join(self.bin_dir, "pg_ctl")
        try:
            self._run([pg_ctl, "-D", self.data_dir, "-m", "fast", "-w", "-t", "60", "stop"], timeout=90)
        except Exception as e:
            log(f"pg_ctl stop failed ({e}); killing the postmaster")
            pid = self.pid()
            if pid:
                os.kill(pid, signal.SIGQUIT)
                time.sleep(2)
                if self.pid():
                    os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------


def create_table(conn, table: str) -> None:
    conn.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name VARCHAR, city VARCHAR, price BIGINT)")


def row_values(i: int) -> tuple[int, str, str, int]:
    return i, f"customer_{i:08d}", CITIES[i % len(CITIES)], (i * 7919) % 100_000


def copy_chunks(rows: int, chunk_rows: int):
    """Rows in COPY text format, chunk_rows rows per chunk."""
    for start in range(0, rows, chunk_rows):
        yield "".join(
            "%d\t%s\t%s\t%d\n" % row_values(i) for i in range(start, min(rows, start + chunk_rows))
        ).encode()


@dataclass
class Run:
    phase: str
    system: str
    repeat: int
    table: str
    rows: int
    seconds: float
    rows_per_sec: float
    server_cpu_seconds: float
    client_cpu_seconds: float
    connections: int = 1
    visible_seconds: float | None = None  # COPY plus whatever makes rows queryable (FLUSH)
    latency_ms: dict = field(default_factory=dict)
    counted_rows: int | None = None
    verify_error: str | None = None
    peak_rss_mib: float | None = None  # the server's VmHWM after the run (its peak since it started)


def peak_rss_mib(pid: int | None) -> float | None:
    """A process's peak resident set size so far, from /proc/PID/status."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def client_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def verify(server: Server, conn, table: str, expected: int, run: Run) -> None:
    try:
        server.make_visible(conn)
        run.counted_rows = int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        if run.counted_rows != expected:
            run.verify_error = f"expected {expected} rows, SELECT count(*) returned {run.counted_rows}"
    except psycopg.Error as e:
        run.verify_error = f"verification query failed: {e}"
    if run.verify_error:
        log(f"warning: {server.label} {table}: {run.verify_error}")


def run_copy(server: Server, table: str, chunks: list[bytes], rows: int, repeat: int) -> Run:
    with server.connect() as conn:
        create_table(conn, table)
        server.set_phase("copy")
        cpu0, ccpu0 = server.cpu_seconds(), client_cpu()
        t0 = time.perf_counter()
        with conn.cursor() as cur:
            with cur.copy(f"COPY {table} (id, name, city, price) FROM STDIN") as copy:
                for chunk in chunks:
                    copy.write(chunk)
        t1 = time.perf_counter()
        t2 = t1
        if server.flush_sql:
            server.make_visible(conn)
            t2 = time.perf_counter()
        cpu1, ccpu1 = server.cpu_seconds(), client_cpu()
        run = Run(
            phase="copy", system=server.key, repeat=repeat, table=table, rows=rows,
            seconds=t1 - t0, rows_per_sec=rows / (t1 - t0),
            server_cpu_seconds=cpu1 - cpu0, client_cpu_seconds=ccpu1 - ccpu0,
            visible_seconds=t2 - t0,
            peak_rss_mib=peak_rss_mib(server.pid()),
        )
        verify(server, conn, table, rows, run)
    return run


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    idx = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[idx]


def run_inserts(server: Server, table: str, phase: str, connections: int, seconds: float,
                count: int | None, repeat: int) -> Run:
    with server.connect() as admin:
        create_table(admin, table)
    sql = INSERT_SQL.format(table=table)
    stop = threading.Event()
    state: dict = {}

    def all_connected() -> None:
        # Runs once every connection is open, just before they all start.
        state["cpu0"] = server.cpu_seconds()
        state["ccpu0"] = client_cpu()
        state["t0"] = time.perf_counter()

    barrier = threading.Barrier(connections + 1, action=all_connected)
    done = [0] * connections
    ends = [0.0] * connections
    lats: list[list[float]] = [[] for _ in range(connections)]
    errors: list[BaseException] = []
    # per-connection quota when a count is given
    quota = [None] * connections
    if count is not None:
        quota = [count // connections + (1 if w < count % connections else 0) for w in range(connections)]

    def worker(w: int) -> None:
        conn = None
        try:
            conn = server.connect()
            cur = conn.cursor()
            barrier.wait()
            deadline = state["t0"] + seconds
            lat = lats[w]
            n = 0
            limit = quota[w]
            perf = time.perf_counter
            while not stop.is_set():
                if limit is not None:
                    if n >= limit:
                        break
                elif perf() >= deadline:
                    break
                i = w + n * connections  # disjoint, dense ids across connections
                _, name, city, price = row_values(i)
                s = perf()
                cur.execute(sql, (Int8(i), name, city, Int8(price)))
                lat.append(perf() - s)
                n += 1
            done[w] = n
            ends[w] = perf()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
            stop.set()
            try:
                barrier.abort()
            except Exception:
                pass
        finally:
            if conn is not None:
                conn.close()

    server.set_phase(phase)
    threads = [threading.Thread(target=worker, args=(w,), daemon=True, name=f"ins-{w}") for w in range(connections)]
    for t in threads:
        t.start()
    try:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.5)
    finally:
        stop.set()
        barrier.abort()
    if errors:
        raise RuntimeError(f"{server.label}: an INSERT connection failed: {errors[0]!r}") from errors[0]
    # Let the server reap the backends of closed connections before reading CPU.
    time.sleep(0.2)
    cpu1, ccpu1 = server.cpu_seconds(), client_cpu()
    rows = sum(done)
    elapsed = max(ends) - state["t0"]
    all_lat = sorted(x for per in lats for x in per)
    run = Run(
        phase=phase, system=server.key, repeat=repeat, table=table, rows=rows,
        seconds=elapsed, rows_per_sec=rows / elapsed if elapsed > 0 else 0.0,
        server_cpu_seconds=cpu1 - state["cpu0"], client_cpu_seconds=ccpu1 - state["ccpu0"],
        connections=connections,
        latency_ms={
            "mean": (statistics.fmean(all_lat) if all_lat else float("nan")) * 1e3,
            "p50": percentile(all_lat, 0.50) * 1e3,
            "p90": percentile(all_lat, 0.90) * 1e3,
            "p99": percentile(all_lat, 0.99) * 1e3,
            "max": (all_lat[-1] if all_lat else float("nan")) * 1e3,
        },
    )
    with server.connect() as conn:
        verify(server, conn, table, rows, run)
    return run


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def fmt_int(x: float | None) -> str:
    return "—" if x is None or x != x else f"{x:,.0f}"


def fmt_ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or not b or a != a or b != b:
        return "—"
    return f"{a / b:.2f}×"


def fmt_mib(kib: int | None) -> str:
    return "—" if not kib else f"{kib / 1024:,.0f}"


def machine_info(tmp_dir: str) -> dict:
    cpu = "unknown CPU"
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    total_mem = None
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            total_mem = int(line.split()[1])
    fstype, mountpoint = "unknown", "/"
    real = os.path.realpath(tmp_dir)
    for line in (_read("/proc/mounts") or "").splitlines():
        parts = line.split()
        if len(parts) >= 3:
            mnt = parts[1]
            inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
            if inside and len(mnt) >= len(mountpoint):
                mountpoint, fstype = mnt, parts[2]
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(total_mem / 1024 / 1024, 1) if total_mem else None,
        "kernel": platform.release(),
        "tmp_dir": real,
        "tmp_fs": fstype,
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
        "libpq": psycopg.pq.version(),
    }


def summarize(runs: list[Run], systems: list[str], phases: list[str]) -> dict:
    out: dict = {}
    for phase in phases:
        for sysname in systems:
            rs = [r for r in runs if r.phase == phase and r.system == sysname]
            if not rs:
                continue
            entry = {
                "rows_per_sec": statistics.median(r.rows_per_sec for r in rs),
                "min_rows_per_sec": min(r.rows_per_sec for r in rs),
                "max_rows_per_sec": max(r.rows_per_sec for r in rs),
                "runs": len(rs),
                "server_cpu_us_per_row": statistics.median(
                    r.server_cpu_seconds / r.rows * 1e6 if r.rows else float("nan") for r in rs),
                "client_cpu_share": statistics.median(r.client_cpu_seconds / r.seconds for r in rs),
            }
            if phase == "copy":
                entry["visible_rows_per_sec"] = statistics.median(r.rows / r.visible_seconds for r in rs)
            else:
                for q in ("mean", "p50", "p90", "p99"):
                    entry[f"latency_{q}_ms"] = statistics.median(r.latency_ms[q] for r in rs)
            out.setdefault(phase, {})[sysname] = entry
        pairs = pair_ratios(runs, phase)
        if pairs:
            out[phase]["pair_ratio_median"] = statistics.median(pairs)
            out[phase]["pairs_weir_ahead"] = sum(r >= 1 for r in pairs)
            out[phase]["pairs"] = len(pairs)
    return out


def pair_ratios(runs: list[Run], phase: str) -> list[float]:
    """weir / PostgreSQL rows/s of each repeat, the two run back to back."""
    by_repeat: dict[int, dict[str, float]] = {}
    for r in runs:
        if r.phase == phase:
            by_repeat.setdefault(r.repeat, {})[r.system] = r.rows_per_sec
    return [v["weir"] / v["pg"] for v in by_repeat.values() if v.get("weir") and v.get("pg")]


def markdown(args, servers: list[Server], runs: list[Run], summary: dict, memory: dict, machine: dict) -> str:
    by_key = {s.key: s for s in servers}
    cols = [("weir", "weir"), ("pg", "PostgreSQL 15")]
    lines: list[str] = []

    def val(phase, key, metric):
        return summary.get(phase, {}).get(key, {}).get(metric)

    def row(label, phase, metric, fmt=fmt_int, ratio=True):
        cells = [fmt(val(phase, k, metric)) for k, _ in cols]
        r = fmt_ratio(val(phase, "weir", metric), val(phase, "pg", metric)) if ratio else "—"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {r} |")

    def pairs_row(label, phase):
        entry = summary.get(phase, {})
        if "pair_ratio_median" not in entry:
            return
        lines.append(
            f"| {label}: median of the run-by-run ratios (pairs weir won) | — | — | "
            f"{entry['pair_ratio_median']:.2f}× ({entry['pairs_weir_ahead']} of {entry['pairs']}) |"
        )

    n = args.concurrency
    dur = (f"{args.insert_count:,} rows per run" if args.insert_count
           else f"{args.insert_seconds:g} s per run")
    lines.append("### Ingest: weir and PostgreSQL 15")
    lines.append("")
    lines.append(
        f"Bulk load of {args.copy_rows:,} rows `(id BIGINT PRIMARY KEY, name VARCHAR, city VARCHAR, "
        f"price BIGINT)` with `COPY ... FROM STDIN` (text format), and single-row parameterised "
        f"`INSERT`s (extended protocol, autocommit, {dur}) from 1 and from {n} connections. "
        f"Median of {args.repeat} run{'s' if args.repeat != 1 else ''} per system, the systems "
        f"alternating run by run (each pair starting with the one that went second before); "
        f"higher rows/s is better, lower memory is better."
    )
    lines.append("")
    lines.append("| Workload | weir | PostgreSQL 15 | weir / PostgreSQL |")
    lines.append("|---|---:|---:|---:|")
    phases = [p for p in PHASES if p in args.phases]
    if "copy" in phases:
        row("Bulk load, `COPY FROM STDIN` (rows/s)", "copy", "rows_per_sec")
        row("Bulk load until queryable¹ (rows/s)", "copy", "visible_rows_per_sec")
    if "insert" in phases:
        row("`INSERT`, 1 connection (rows/s)", "insert", "rows_per_sec")
        pairs_row("`INSERT`, 1 connection", "insert")
    if "insert-concurrent" in phases:
        row(f"`INSERT`, {n} connections (rows/s)", "insert-concurrent", "rows_per_sec")
        pairs_row(f"`INSERT`, {n} connections", "insert-concurrent")
    if "insert" in phases:
        # In µs: one connection's statements take tens of µs, and the two
        # systems differ by a few, which milliseconds to two places hide.
        cells = []
        for k, _ in cols:
            qs = [val("insert", k, f"latency_{q}_ms") for q in ("mean", "p50", "p90", "p99")]
            cells.append("—" if None in qs else " / ".join(f"{q * 1e3:,.0f}" for q in qs))
        lines.append("| `INSERT` latency mean / p50 / p90 / p99, 1 connection (µs) | "
                     + " | ".join(cells) + " | — |")
    for phase, label in (("copy", "bulk load"), ("insert", "1 conn."), ("insert-concurrent", f"{n} conn.")):
        if phase in phases:
            row(f"Server CPU per row, {label} (µs)", phase, "server_cpu_us_per_row",
                fmt=lambda x: "—" if x is None or x != x else f"{x:,.1f}")
    mem_cells = [fmt_mib(memory.get("weir", {}).get("root_vmhwm_kib")),
                 fmt_mib(memory.get("pg", {}).get("peak_pss_kib"))]
    w, p = memory.get("weir", {}).get("root_vmhwm_kib"), memory.get("pg", {}).get("peak_pss_kib")
    lines.append(f"| Peak memory² (MiB) | {mem_cells[0]} | {mem_cells[1]} | {fmt_ratio(w, p)} |")
    lines.append("")

    notes = []
    notes.append(
        "¹ Until a `SELECT` sees the rows: for weir `COPY` followed by `FLUSH`; PostgreSQL's rows are "
        "visible when `COPY` commits."
    )
    pgm = memory.get("pg", {})
    notes.append(
        "² weir: `VmHWM` (peak resident set) of the server process over the whole run. PostgreSQL: the "
        "highest sum of PSS over the postmaster and all its children (backends, checkpointer, WAL "
        f"writer, …), sampled every {args.mem_interval:g} s, which counts `shared_buffers` once"
        + (f"; the sum of `VmHWM` over those processes, which counts shared memory once per process, "
           f"peaked at {fmt_mib(pgm.get('peak_sum_vmhwm_kib'))} MiB." if pgm.get("peak_sum_vmhwm_kib") else ".")
    )
    lines.extend(notes)
    lines.append("")

    pg = by_key.get("pg")
    weir = by_key.get("weir")
    env = (
        f"Machine: {machine['cpu']}, {machine['cores']} cores"
        + (f", {machine['memory_gib']} GiB RAM" if machine.get("memory_gib") else "")
        + f", Linux {machine['kernel']}; data directories on {machine['tmp_fs']} "
        f"(`{machine['tmp_dir']}`). Client: Python {machine['python']}, psycopg {machine['psycopg']} "
        f"(libpq {machine['libpq']}), on the same machine, over TCP to 127.0.0.1."
    )
    lines.append(env)
    if weir:
        lines.append(f"weir: `{weir.version}`, default configuration"
                     + (f" plus `{' '.join(args.weir_arg)}`" if args.weir_arg else "") + ".")
    if pg:
        s = pg.settings
        lines.append(
            f"PostgreSQL: {pg.version}, initdb defaults (shared_buffers = {s.get('shared_buffers')}, "
            f"fsync = {s.get('fsync')}, synchronous_commit = {s.get('synchronous_commit')}, "
            f"wal_level = {s.get('wal_level')}, wal_sync_method = {s.get('wal_sync_method')})."
        )
    busy = [r for r in runs if r.seconds > 0 and r.client_cpu_seconds / r.seconds > 0.85]
    if busy:
        worst = max(busy, key=lambda r: r.client_cpu_seconds / r.seconds)
        lines.append(
            f"The Python client used up to {worst.client_cpu_seconds / worst.seconds:.0%} of a core "
            f"({worst.phase}, {worst.system}); those numbers may be bound by the client, not the server."
        )
    if machine["tmp_fs"] in ("tmpfs", "ramfs"):
        lines.append("**The data directories were on a RAM file system: fsync costs nothing there.**")
    bad = [r for r in runs if r.verify_error]
    if bad:
        lines.append(f"**{len(bad)} run(s) failed row-count verification; see the JSON output.**")
    lines.append("")
    lines.append("Reproduce with:")
    lines.append("")
    lines.append("```sh")
    lines.append("cargo build --release")
    lines.append("python3 " + " ".join(["benches/ingest.py", *args.argv_for_docs]))
    lines.append("```")
    lines.append("")
    lines.append("<details><summary>All runs</summary>")
    lines.append("")
    lines.append("| Workload | System | Run | Rows | Seconds | Rows/s | Server CPU s | Client CPU s | p50 / p99 ms |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        lat = (f"{r.latency_ms['p50']:.2f} / {r.latency_ms['p99']:.2f}" if r.latency_ms else "—")
        lines.append(
            f"| {r.phase} | {r.system} | {r.repeat} | {r.rows:,} | {r.seconds:.2f} | {r.rows_per_sec:,.0f} "
            f"| {r.server_cpu_seconds:.2f} | {r.client_cpu_seconds:.2f} | {lat} |"
        )
    lines.append("")
    lines.append("</details>")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Ingest benchmark: weir vs PostgreSQL 15 (COPY, single-row INSERTs).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--weir-bin", default=DEFAULT_WEIR_BIN, help="weir release binary")
    p.add_argument("--weir-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for `weir serve` (repeatable)")
    p.add_argument("--pg-bin-dir", default=DEFAULT_PG_BIN_DIR, help="PostgreSQL 15 server binaries")
    p.add_argument("--pg-user", default="postgres",
                   help="unprivileged user to run PostgreSQL as when this script runs as root")
    p.add_argument("--rows", type=int, default=1_000_000, help="rows in the COPY bulk load")
    p.add_argument("--copy-rows", type=int, default=None,
                   help="rows in the COPY bulk load; --rows when not given")
    p.add_argument("--copy-chunk-rows", type=int, default=10_000, help="rows per COPY data message batch")
    p.add_argument("--insert-seconds", type=float, default=10.0, help="duration of each INSERT run")
    p.add_argument("--insert-count", type=int, default=None,
                   help="run each INSERT measurement for this many rows instead of --insert-seconds")
    p.add_argument("--concurrency", type=int, default=16, help="connections in the concurrent INSERT run")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement and system")
    p.add_argument("--phases", default=",".join(PHASES),
                   help=f"comma-separated subset of {','.join(PHASES)}")
    p.add_argument("--no-prepare", action="store_true",
                   help="never use named prepared statements (psycopg prepares after 5 executions by default)")
    p.add_argument("--skip-weir", action="store_true", help="measure PostgreSQL only")
    p.add_argument("--skip-pg", action="store_true", help="measure weir only")
    p.add_argument("--json", metavar="FILE", help="also write all runs and the summary as JSON")
    p.add_argument("--tmp-dir", default=tempfile.gettempdir(),
                   help="where the servers' scratch directories go (its file system matters for fsync)")
    p.add_argument("--keep", action="store_true", help="keep the scratch directories and logs")
    p.add_argument("--startup-timeout", type=float, default=60.0, help="seconds to wait for a server to start")
    p.add_argument("--mem-interval", type=float, default=0.25, help="memory sampling interval in seconds")
    p.add_argument("--settle-seconds", type=float, default=1.0, help="pause between runs")
    args = p.parse_args(argv)
    args.phases = [x.strip() for x in args.phases.split(",") if x.strip()]
    if args.copy_rows is None:
        args.copy_rows = args.rows
    if args.copy_rows < 1:
        p.error("--copy-rows must be positive")
    unknown = [x for x in args.phases if x not in PHASES]
    if unknown:
        p.error(f"unknown phase(s) {unknown}; choose from {PHASES}")
    if args.skip_weir and args.skip_pg:
        p.error("--skip-weir and --skip-pg together leave nothing to measure")
    if args.rows < 1 or args.repeat < 1 or args.concurrency < 1 or args.copy_chunk_rows < 1:
        p.error("--rows, --repeat, --concurrency and --copy-chunk-rows must be positive")
    # The command line as it should appear in docs: without local paths.
    args.argv_for_docs = [
        a for i, a in enumerate(argv)
        if a not in ("--json", "--weir-bin", "--tmp-dir", "--pg-bin-dir")
        and not (i > 0 and argv[i - 1] in ("--json", "--weir-bin", "--tmp-dir", "--pg-bin-dir"))
        and not a.startswith(("--json=", "--weir-bin=", "--tmp-dir=", "--pg-bin-dir="))
    ]
    return args


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if psycopg is None:
        print('benches/ingest.py needs psycopg 3; install it with: pip install "psycopg[binary]"',
              file=sys.stderr)
        return 2
    if not sys.platform.startswith("linux"):
        print("benches/ingest.py reads /proc and runs on Linux only", file=sys.stderr)
        return 2
    if not args.skip_weir and not os.access(args.weir_bin, os.X_OK):
        print(
            f"weir binary not found at {args.weir_bin}.\n"
            f"Build it with `CARGO_TARGET_DIR={DEFAULT_TARGET_DIR} cargo build --release`, "
            "pass --weir-bin PATH, or use --skip-weir to measure PostgreSQL only.",
            file=sys.stderr,
        )
        return 2
    signal.signal(signal.SIGTERM, _on_sigterm)

    servers: list[Server] = []
    if not args.skip_weir:
        servers.append(WeirServer(args))
    if not args.skip_pg:
        servers.append(PostgresServer(args))

    runs: list[Run] = []
    started: list[Server] = []
    rc = 0
    try:
        chunks: list[bytes] = []
        if "copy" in args.phases:
            log(f"generating {args.copy_rows:,} rows of COPY data")
            chunks = list(copy_chunks(args.copy_rows, args.copy_chunk_rows))
            log(f"  {sum(map(len, chunks)) / 1e6:.1f} MB in {len(chunks)} chunks")
        for s in servers:
            started.append(s)
            s.start()
            s.start_sampler()
        machine = machine_info(args.tmp_dir)

        for phase in [p for p in PHASES if p in args.phases]:
            for rep in range(1, args.repeat + 1):
                # Each pair starts with the system that went second in the
                # pair before, so that a drift in the machine's speed does
                # not favour one system.
                order = servers if rep % 2 else servers[::-1]
                for s in order:
                    s.check_alive()
                    time.sleep(args.settle_seconds)
                    table = f"bench_{phase.replace('-', '_')}_{rep}"
                    if phase == "copy":
                        run = run_copy(s, table, chunks, args.copy_rows, rep)
                    else:
                        conns = 1 if phase == "insert" else args.concurrency
                        run = run_inserts(s, table, phase, conns, args.insert_seconds,
                                          args.insert_count, rep)
                    s.set_phase("idle")
                    runs.append(run)
                    extra = ""
                    if run.latency_ms:
                        extra = f", p50 {run.latency_ms['p50']:.2f} ms, p99 {run.latency_ms['p99']:.2f} ms"
                    if run.peak_rss_mib is not None:
                        extra += f", server peak RSS {run.peak_rss_mib:,.0f} MiB"
                    log(f"{phase:<18} {s.key:<4} run {rep}: {run.rows:,} rows in {run.seconds:.2f} s = "
                        f"{run.rows_per_sec:,.0f} rows/s{extra}")

        memory = {s.key: s.memory() for s in servers}
        summary = summarize(runs, [s.key for s in servers], args.phases)
        report = markdown(args, servers, runs, summary, memory, machine)
        sys.stdout.write(report)
        sys.stdout.flush()
        if args.json:
            doc = {
                "argv": argv,
                "config": {k: v for k, v in vars(args).items() if k != "argv_for_docs"},
                "machine": machine,
                "servers": {s.key: {"version": s.version, "settings": s.settings} for s in servers},
                "summary": summary,
                "ratios_weir_over_pg": {
                    phase: {
                        m: v["weir"][m] / v["pg"][m]
                        for m in v.get("weir", {})
                        if "pg" in v and isinstance(v["weir"].get(m), (int, float)) and v["pg"].get(m)
                    }
                    for phase, v in summary.items() if "weir" in v and "pg" in v
                },
                "memory_kib": memory,
                "runs": [asdict(r) for r in runs],
            }
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=2)
                f.write("\n")
            log(f"wrote {args.json}")
    except KeyboardInterrupt:
        log("interrupted; shutting the servers down")
        rc = 130
    except Exception as e:
        log(f"error: {e}")
        rc = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip the cleanup
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for s in reversed(started):
            try:
                if s.sampler:
                    s.sampler.stop()
                s.stop()
            except Exception as e:
                log(f"warning: stopping {s.label} failed: {e}")
            s.cleanup_dir()
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
