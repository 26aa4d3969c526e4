"""A real one-node SLURM cluster on 127.0.0.1, started from a temporary folder and stopped by PID.

Debian's SLURM 22.05 (packages slurmctld, slurmd, slurm-client, munge) starts by hand without
systemd: a private munged (its own key and socket, run as the `munge` user), slurmctld and
slurmd, all configured by a slurm.conf in the folder and listening on free ports of
127.0.0.1. Nothing in /etc is used or changed; clients (sbatch, squeue, sinfo, scontrol) find
the cluster through the SLURM_CONF (and PATH) that ``SlurmCluster.env`` returns.

There is no accounting storage (no slurmdbd), so ``sacct`` fails: the Snakemake SLURM executor
must query job states with ``slurm-status-command: squeue`` (MinJobAge is an hour, far above the
3 x init-seconds-before-status-checks it needs).

    with SlurmCluster(tmp_path) as cluster:
        subprocess.run(["sinfo"], env={**os.environ, **cluster.env})

By hand (a shell on a machine with the packages, as root):
    python tests/slurm_cluster.py start /tmp/slurm   # prints the exports: SLURM_CONF=/tmp/slurm/slurm.conf, PATH
    python tests/slurm_cluster.py stop /tmp/slurm
"""
from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "sinfo", "scontrol")
PACKAGES = "slurmctld slurmd slurm-client munge"
PARTITION = "debug"
# Daemons in the order they start; stop() goes the other way.
DAEMONS = ("munged", "slurmctld", "slurmd")


def missing_reason() -> str | None:
    """Why a cluster cannot be started here, or None when it can."""
    if sys.platform != "linux":
        return "a SLURM cluster needs Linux"
    missing = [p for p in PROGRAMS if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]
    if missing:
        return f"SLURM is not installed ({', '.join(missing)} not found; apt-get install {PACKAGES})"
    if os.geteuid() != 0:
        return "starting slurmd needs root"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no 'munge' user (the munge package creates it)"
    return None


def _program(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


class SlurmCluster:
    """One node, one partition (``debug``), daemons under ``root``; ``stop()`` kills only their PIDs."""

    def __init__(self, root, cpus: int | None = None, enforce_memory: bool = False, slurmd_timeout: int = 300):
        """enforce_memory: kill a job step whose memory exceeds its --mem (jobacct_gather/linux polling every
        second with OverMemoryKill: this container has no cgroup SLURM may use), as a real cluster does.
        slurmd_timeout: seconds of silence before slurmctld declares the node down (SLURM's default, 300;
        the fault tests stop slurmd and want it sooner)."""
        self.root = Path(root).resolve()
        self.cpus = cpus
        self.enforce_memory = enforce_memory
        self.slurmd_timeout = slurmd_timeout
        self.conf = self.root / "slurm.conf"
        self.munge_dir = self.root / "munge"
        self.socket = self.munge_dir / "munge.socket"

    # --- files ---------------------------------------------------------------------------

    def pid_file(self, daemon: str) -> Path:
        return (self.munge_dir if daemon == "munged" else self.root) / f"{daemon}.pid"

    def log_file(self, daemon: str) -> Path:
        return (self.munge_dir if daemon == "munged" else self.root) / f"{daemon}.log"

    @property
    def env(self) -> dict[str, str]:
        """What a client (sbatch, squeue, snakemake) needs to reach this cluster.

        SLURM_CONF names the configuration. A real cluster also has /etc/slurm/slurm.conf (or
        configless DNS records) for commands that run without SLURM_CONF: the executor's job step
        drops every SLURM_* variable before its nested `srun`. Rather than write to /etc, the
        cluster's bin/ folder comes first on PATH with an `srun` that sets SLURM_CONF again.
        """
        return {"SLURM_CONF": str(self.conf), "PATH": f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}

    def _node_line(self) -> str:
        """`slurmd -C` describes this machine (CPUs, RealMemory) exactly as slurmd will check it."""
        out = subprocess.run([_program("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout
        line = next(line for line in out.splitlines() if line.startswith("NodeName="))
        fields = dict(field.split("=", 1) for field in line.split())
        if self.cpus:
            fields.update(CPUs=str(self.cpus), Boards="1", SocketsPerBoard="1", CoresPerSocket=str(self.cpus),
                          ThreadsPerCore="1")
        fields["RealMemory"] = str(int(fields["RealMemory"]) - 256)  # leave slurmd some room
        self.node = fields["NodeName"]
        return " ".join(f"{k}={v}" for k, v in fields.items()) + " NodeAddr=127.0.0.1 State=UNKNOWN"

    def write_config(self) -> None:
        for folder in (self.root, self.root / "state", self.root / "spool", self.munge_dir):
            folder.mkdir(parents=True, exist_ok=True)
        munge = pwd.getpwnam("munge")
        # munged runs as `munge`: it must reach its socket (every folder above it searchable by all)
        # and own its key; the folder must not be writable by others.
        os.chmod(self.root, 0o755)
        os.chown(self.munge_dir, munge.pw_uid, munge.pw_gid)
        os.chmod(self.munge_dir, 0o755)
        key = self.munge_dir / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        os.chown(key, munge.pw_uid, munge.pw_gid)
        os.chmod(key, 0o400)
        bin_dir = self.root / "bin"
        bin_dir.mkdir(exist_ok=True)
        srun = bin_dir / "srun"
        srun.write_text(f'#!/bin/sh\nSLURM_CONF={self.conf} exec {_program("srun")} "$@"\n')
        srun.chmod(0o755)
        self.conf.write_text(f"""\
# A one-node test cluster (tests/slurm_cluster.py); everything lives in {self.root}
ClusterName=headprune
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.socket}
StateSaveLocation={self.root}/state
SlurmdSpoolDir={self.root}/spool
SlurmctldPidFile={self.pid_file("slurmctld")}
SlurmdPidFile={self.pid_file("slurmd")}
SlurmctldLogFile={self.log_file("slurmctld")}
SlurmdLogFile={self.log_file("slurmd")}
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
MinJobAge=3600
ReturnToService=2
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
{self._accounting_lines()}
SlurmdTimeout={self.slurmd_timeout}
JobCompType=jobcomp/none
MpiDefault=none
{self._node_line()}
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def _accounting_lines(self) -> str:
        if not self.enforce_memory:
            return "JobAcctGatherType=jobacct_gather/none"
        return ("JobAcctGatherType=jobacct_gather/linux\nJobAcctGatherFrequency=1\n"
                "JobAcctGatherParams=OverMemoryKill")

    # --- daemons -------------------------------------------------------------------------

    def start(self, timeout: float = 60) -> "SlurmCluster":
        reason = missing_reason()
        if reason:
            raise RuntimeError(reason)
        self.write_config()
        env = {**os.environ, **self.env}
        try:
            self._spawn("munged", [_program("munged"), f"--socket={self.socket}",
                                   f"--key-file={self.munge_dir / 'munge.key'}",
                                   f"--pid-file={self.pid_file('munged')}", f"--log-file={self.log_file('munged')}",
                                   f"--seed-file={self.munge_dir / 'munged.seed'}"], env, user="munge")
            self._wait_for(lambda: self.socket.exists(), "munged socket", timeout)
            self._spawn("slurmctld", [_program("slurmctld"), "-f", str(self.conf)], env)
            self._wait_for(lambda: self._run("scontrol", "ping").returncode == 0 and
                           "UP" in self._run("scontrol", "ping").stdout, "slurmctld", timeout)
            self.start_slurmd(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def start_slurmd(self, timeout: float = 60) -> None:
        """Start slurmd (again, after ``stop_daemon("slurmd")``) and wait until the node takes jobs."""
        self._spawn("slurmd", [_program("slurmd"), "-f", str(self.conf)], {**os.environ, **self.env})
        self._wait_for(lambda: self.node_state().rstrip("*") in ("idle", "mix", "alloc"), "node taking jobs",
                       timeout)

    def node_state(self) -> str:
        """sinfo's short state of the node: idle, alloc, mix, down*, ..."""
        return self._run("sinfo", "-h", "-o", "%t").stdout.strip()

    def stop_daemon(self, daemon: str, timeout: float = 30) -> None:
        """SIGTERM to one daemon by its PID (SIGKILL after `timeout`); its jobs' slurmstepd stay."""
        pid = self._pid(daemon)
        if pid is None or not _alive(pid):
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)

    def _spawn(self, daemon: str, command: list[str], env: dict, user: str | None = None) -> None:
        # Each daemon forks into the background and writes its pid file; the launcher exits.
        with open(self.root / f"{daemon}.launch.log", "w") as out:
            launcher = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, user=user,
                                      stdin=subprocess.DEVNULL, timeout=60)
        if launcher.returncode != 0:
            raise RuntimeError(f"{daemon} did not start (exit {launcher.returncode}):\n" + self.logs(daemon))
        self._wait_for(lambda: self._pid(daemon) is not None, f"{daemon}'s pid file", 30)

    def _pid(self, daemon: str) -> int | None:
        try:
            return int(self.pid_file(daemon).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _run(self, *command: str) -> subprocess.CompletedProcess:
        return subprocess.run(command, env={**os.environ, **self.env}, capture_output=True, text=True, timeout=30)

    def _wait_for(self, ready, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if ready():
                    return
            except (OSError, subprocess.SubprocessError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"SLURM test cluster: no {what} after {timeout:.0f} s\n" + self.logs())

    def logs(self, *daemons: str) -> str:
        parts = []
        for daemon in daemons or DAEMONS:
            for path in (self.root / f"{daemon}.launch.log", self.log_file(daemon)):
                if path.exists():
                    parts.append(f"--- {path}\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(parts)

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM to each daemon by the PID in its pid file, SIGKILL if it is still there after `timeout`.

        The cluster's jobs are cancelled first, so that no job's slurmstepd outlives its slurmd."""
        if self.running()["slurmctld"]:
            try:
                user = pwd.getpwuid(os.getuid()).pw_name
                self._run("scancel", "--full", "--state=RUNNING", f"--user={user}")
                self._run("scancel", "--state=PENDING", f"--user={user}")
                deadline = time.monotonic() + 20
                while self._run("squeue", "-h", "-t", "RUNNING,COMPLETING").stdout.strip() and \
                        time.monotonic() < deadline:
                    time.sleep(0.5)
            except (OSError, subprocess.SubprocessError):
                pass
        for daemon in reversed(DAEMONS):
            self.stop_daemon(daemon, timeout)

    def running(self) -> dict[str, bool]:
        return {daemon: (pid := self._pid(daemon)) is not None and _alive(pid) for daemon in DAEMONS}

    def __enter__(self) -> "SlurmCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("start", "stop"):
        sys.exit("usage: python tests/slurm_cluster.py start|stop FOLDER")
    cluster = SlurmCluster(sys.argv[2])
    if sys.argv[1] == "start":
        cluster.start()
        print(" ".join(f"export {key}={value};" for key, value in cluster.env.items()))
    else:
        cluster.stop()
