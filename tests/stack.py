"""The cluster stack of docker/ (PostgreSQL, MLflow server, Ray head + worker) on this
machine, without Docker, for integration tests.

Every service is started through the same script as in docker-compose.yml
(docker/services/*.sh), in its own process group, and stopped by that group only: never
`ray stop` or a kill by name, since other users of the machine run Ray and MLflow too.

Ray turns a loopback address into the machine's outward-facing address (it wants nodes
other machines can reach), so on a shared host a "local" cluster would talk over the
machine's network interface. `LoopbackNetns` puts this process (and so every service and
the sweep it starts) in a private network namespace whose only interface is loopback:
nothing can leave the machine, and no port can collide with another user's.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
SERVICES = REPO / "docker" / "services"

_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


# --------------------------------------------------------------------------- host checks
def postgres_bin() -> Path | None:
    """Debian's server binaries (not on PATH), or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"),
                   key=lambda p: [int(x) if x.isdigit() else 0 for x in p.parent.parent.name.split(".")])
    if found:
        return found[-1].parent
    exe = shutil.which("postgres")
    return Path(exe).parent if exe else None


def missing_prerequisites() -> list[str]:
    """What this machine lacks to run the stack (empty = everything is there)."""
    out = []
    if postgres_bin() is None or not (postgres_bin() / "initdb").exists():
        out.append("PostgreSQL server binaries (apt-get install postgresql)")
    if os.geteuid() != 0:
        out.append("root (for a loopback-only network namespace and to run PostgreSQL as its own user)")
    for mod, pkg in (("psycopg2", "psycopg2-binary"),):
        try:
            __import__(mod)
        except ImportError:
            out.append(f"the Python package {pkg} (pip install -e '.[test]')")
    if shutil.which("setpriv") is None:
        out.append("setpriv (util-linux)")
    return out


# --------------------------------------------------------------------------- network
class LoopbackNetns:
    """Move this thread (and every process it starts) into a fresh network namespace with
    only `lo`, and back out on exit. Needs CAP_SYS_ADMIN (root)."""

    def __init__(self):
        self._orig: int | None = None
        self._libc = ctypes.CDLL(None, use_errno=True)

    def __enter__(self) -> "LoopbackNetns":
        self._orig = os.open("/proc/self/ns/net", os.O_RDONLY)
        if self._libc.unshare(_CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            os.close(self._orig)
            self._orig = None
            raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")
        # a new namespace's loopback starts down
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            ifr = struct.pack("16sh14x", b"lo", 0)
            flags = struct.unpack("16sh14x", fcntl.ioctl(s, _SIOCGIFFLAGS, ifr))[1]
            fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sh14x", b"lo", flags | _IFF_UP))
        return self

    def __exit__(self, *exc) -> None:
        if self._orig is None:
            return
        try:
            if self._libc.setns(self._orig, _CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns back to the original network namespace: {os.strerror(err)}")
        finally:
            os.close(self._orig)
            self._orig = None


def free_port() -> int:
    """A port free on 127.0.0.1 right now (the caller binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred: Callable[[], object], timeout: float, what: str,
               service: "Service | None" = None, interval: float = 0.25):
    """Poll `pred` until it returns something truthy; bounded by `timeout` seconds.
    Fails early when `service` died, with the end of its log."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if service is not None and not service.alive():
            raise RuntimeError(f"{service.name} exited (status {service.proc.returncode}) while waiting "
                               f"for {what}; end of its log:\n{service.tail()}")
        if time.monotonic() >= deadline:
            tail = f"; end of {service.name}'s log:\n{service.tail()}" if service else ""
            raise TimeoutError(f"{what}: not within {timeout:.0f}s{tail}")
        time.sleep(interval)


# --------------------------------------------------------------------------- services
class Service:
    """One docker/services script in its own process group (the script execs its server,
    so the group holds the server and everything it spawned)."""

    def __init__(self, name: str, script: str, env: dict[str, str], log_dir: Path):
        self.name = name
        self.script = SERVICES / script
        self.env = env
        self.log = log_dir / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Service":
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(["bash", str(self.script)], env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def session_pids(self) -> list[int]:
        """Every process of this service: the script is a session leader
        (start_new_session) and its server's children stay in that session even when
        they take a process group of their own (Ray's worker processes do)."""
        if self.proc is None:
            return []
        out = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) == self.proc.pid:  # field 6 of stat: session id
                out.append(int(d.name))
        return out

    def _signal_all(self, sig: int) -> None:
        for pid in [self.proc.pid, *self.session_pids()]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def _wait_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=0.1)  # reaps the script's own process
            if self.proc.poll() is not None and not self.session_pids():
                return True
            if time.monotonic() >= deadline:
                return False

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the server (it stops its children), SIGKILL whatever is left after
        `timeout` seconds."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.proc.pid, signal.SIGTERM)
        if not self._wait_gone(timeout):
            self.kill()

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL every process of the service at once: a crash, as its peers see it."""
        if self.proc is None:
            return
        self._signal_all(signal.SIGKILL)
        if not self._wait_gone(timeout):
            self._signal_all(signal.SIGKILL)  # a child forked in between
            self._wait_gone(timeout)

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def log_has(self, text: str) -> bool:
        try:
            return text in self.log.read_text(errors="replace")
        except OSError:
            return False


class Stack:
    """PostgreSQL + MLflow server (PostgreSQL backend, served artifacts) + Ray head + one Ray
    worker node, all on 127.0.0.1 with ports picked at run time, state under `root`."""

    def __init__(self, root: Path, head_cpus: int = 1, worker_cpus: int = 1):
        self.root = root
        self.head_cpus, self.worker_cpus = head_cpus, worker_cpus
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        # PostgreSQL runs as an unprivileged user that must reach its data directory
        os.chmod(root, 0o755)
        self.pg_port = free_port()
        self.mlflow_port = free_port()
        self.gcs_port = free_port()
        self.db_uri = f"postgresql+psycopg2://mlflow@127.0.0.1:{self.pg_port}/mlflow"
        self.artifacts = root / "artifacts"
        self.services: dict[str, Service] = {}
        # the venv's `mlflow` and `ray` first; Ray workers import this checkout
        self.base_env = dict(os.environ)
        self.base_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), self.base_env.get("PATH", "")])
        self.base_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), self.base_env.get("PYTHONPATH", "")) if p)
        self.base_env["RAY_AUTH_MODE"] = "disabled"
        self.base_env["RAY_USAGE_STATS_ENABLED"] = "0"

    @property
    def tracking_uri(self) -> str:
        return f"http://127.0.0.1:{self.mlflow_port}"

    @property
    def ray_address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    def _service(self, name: str, script: str, **env: str) -> Service:
        svc = Service(name, script, {**self.base_env, **env}, self.logs)
        self.services[name] = svc
        return svc

    # ---------------------------------------------------------------- postgres
    def start_postgres(self, timeout: float = 60.0) -> Service:
        svc = self._service("postgres", "postgres.sh", PGDATA=str(self.root / "pgdata"), PGPORT=str(self.pg_port),
                            PG_LISTEN="127.0.0.1", PG_BIN=str(postgres_bin())).start()

        def ready() -> bool:
            import psycopg2

            try:
                psycopg2.connect(self.db_uri.replace("+psycopg2", ""), connect_timeout=2).close()
                return True
            except psycopg2.OperationalError:
                return False

        wait_until(ready, timeout, "PostgreSQL accepting connections", svc)
        return svc

    # ---------------------------------------------------------------- mlflow
    def start_mlflow(self, timeout: float = 90.0) -> Service:
        """Start (or restart: same database, same artifact directory) the tracking server."""
        old = self.services.get("mlflow")
        if old is not None and old.alive():
            raise RuntimeError("the MLflow server is already running")
        svc = self._service("mlflow", "mlflow.sh", MLFLOW_BACKEND_STORE_URI=self.db_uri,
                            MLFLOW_ARTIFACTS_DESTINATION=str(self.artifacts), MLFLOW_HOST="127.0.0.1",
                            MLFLOW_PORT=str(self.mlflow_port), MLFLOW_WORKERS="1").start()
        wait_until(lambda: http_ok(self.tracking_uri + "/health"), timeout, "MLflow server /health", svc)
        return svc

    # ---------------------------------------------------------------- ray
    def _ray_env(self, node: str, cpus: int, ports: bool) -> dict[str, str]:
        args = [f"--temp-dir={self.root / 'ray' / node}", "--object-store-memory=150000000",
                f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
                f"--metrics-export-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
                f"--dashboard-agent-grpc-port={free_port()}", f"--runtime-env-agent-port={free_port()}"]
        if ports:  # head only
            args += ["--include-dashboard=false", f"--dashboard-port={free_port()}"]
        return dict(KVSWEEP_RAY_CPUS=str(cpus), KVSWEEP_RAY_NODE_IP="127.0.0.1", KVSWEEP_RAY_ARGS=" ".join(args))

    def start_ray_head(self, timeout: float = 90.0) -> Service:
        # the GCS declares a silent node dead after ~3 s instead of Ray's default ~15 s,
        # so a node-loss test waits seconds, not tens of seconds
        fast_health = dict(RAY_health_check_period_ms="1000", RAY_health_check_timeout_ms="1000",
                           RAY_health_check_failure_threshold="3")
        svc = self._service("ray-head", "ray-head.sh", KVSWEEP_RAY_PORT=str(self.gcs_port),
                            **fast_health, **self._ray_env("head", self.head_cpus, True)).start()
        wait_until(lambda: svc.log_has("Ray runtime started"), timeout, "Ray head started", svc)
        return svc

    def start_ray_worker(self, timeout: float = 90.0) -> Service:
        svc = self._service("ray-worker", "ray-worker.sh", KVSWEEP_RAY_ADDRESS=self.ray_address,
                            **self._ray_env("worker", self.worker_cpus, False)).start()
        wait_until(lambda: svc.log_has("Ray runtime started"), timeout, "Ray worker node joined", svc)
        return svc

    def ray_nodes(self, timeout: float = 60.0) -> list[dict]:
        """Alive nodes as the cluster sees them (asked from a separate driver process, so
        this process never joins the cluster)."""
        code = ("import json, ray; ray.init(address=%r, logging_level='ERROR'); "
                "print(json.dumps([{'id': n['NodeID'], 'ip': n['NodeManagerAddress'], "
                "'cpus': n['Resources'].get('CPU', 0)} for n in ray.nodes() if n['Alive']]))") % self.ray_address
        out = subprocess.run([sys.executable, "-c", code], env=self.base_env, capture_output=True, text=True,
                             timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"listing Ray nodes failed: {out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    # ---------------------------------------------------------------- all
    def start(self) -> "Stack":
        self.start_postgres()
        self.start_mlflow()
        self.start_ray_head()
        self.start_ray_worker()
        return self

    def stop(self) -> None:
        """Stop everything that is still running, newest first; never raises."""
        for name, svc in reversed(list(self.services.items())):
            with contextlib.suppress(Exception):
                # a Ray node takes ~20 s to stop on SIGTERM; its state is thrown away anyway
                svc.stop(timeout=3.0 if name.startswith("ray") else 10.0)

    def sweep_env(self) -> dict[str, str]:
        return dict(self.base_env)


# --------------------------------------------------------------------------- MLflow REST
def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


class MlflowRest:
    """The few REST calls the checks need, in plain urllib (independent of MLflow's client)."""

    def __init__(self, base: str, timeout: float = 10.0):
        self.base = base.rstrip("/") + "/api/2.0/mlflow/"
        self.timeout = timeout

    def _get(self, path: str, **params) -> dict:
        url = self.base + path + "?" + urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(url, timeout=self.timeout) as r:
            return json.loads(r.read() or b"{}")

    def _post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=self.timeout) as r:
            return json.loads(r.read() or b"{}")

    def experiment_id(self, name: str) -> str | None:
        try:
            return self._get("experiments/get-by-name", experiment_name=name)["experiment"]["experiment_id"]
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def runs(self, experiment_id: str) -> list[dict]:
        """Every run of the experiment (all pages)."""
        out, token = [], None
        for _ in range(1000):  # bounded: 1000 pages of 1000 runs
            body = {"experiment_ids": [experiment_id], "max_results": 1000, "run_view_type": "ALL"}
            if token:
                body["page_token"] = token
            page = self._post("runs/search", body)
            out += page.get("runs", [])
            token = page.get("next_page_token")
            if not token:
                break
        return out

    def metric_history(self, run_id: str, key: str) -> list[dict]:
        out, token = [], None
        for _ in range(1000):
            params = {"run_id": run_id, "metric_key": key, "max_results": 25000}
            if token:
                params["page_token"] = token
            page = self._get("metrics/get-history", **params)
            out += page.get("metrics", [])
            token = page.get("next_page_token")
            if not token:
                break
        return out


def tags(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run.get("data", {}).get("tags", [])}


@contextlib.contextmanager
def mlflow_ui(db: Path, cwd: Path):
    """`mlflow server` on a sqlite store at a free port, in its own session, for a browser
    to open; yields its base address and stops it by its process group (never by name)."""
    port = free_port()
    with open(cwd / "mlflow.log", "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}",
                                   "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                                  cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until(lambda: http_ok(base + "/health"), 60, "the MLflow server")
            yield base
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(5)
