"""Inside the parser sandbox: no secrets, no network, a uid of its own, limits that hold, nothing left behind.

Each test runs code in a real sandbox child (shared/ingest/sandbox.py), the way a compromised parser would.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.errors import ExtractionFailed, InvalidInput
from shared.ingest import Format, extract
from shared.ingest.sandbox import DOCUMENT_LIMITS, MEDIA_LIMITS, Limits, run_limited
from tests.security import inside
from tests.security.canary import Canary
from tests.unit.ingest import samples

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
PARSER_ENVIRONMENT = {"PATH", "HOME", "TMPDIR", "LANG", "DO_NOT_TRACK", "UNSTRUCTURED_DISABLE_NOTICE"}
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the worker drops a child to its own uid only when it is root")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory any uid may write in (pytest's tmp_path sits under a directory only root may enter)."""
    path = Path(tempfile.mkdtemp(prefix="mnemoflow-security-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def alive(pid: int, uid: int) -> bool:
    """Whether a process `pid` running as `uid` exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith(("Z", "X"))


def wait_until(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_a_worker_s_secrets_are_not_in_the_child_s_environment_nor_its_memory():
    # A worker of its own (a fresh interpreter, so a fresh forkserver) with a database URL and a provider key.
    token, key = secrets.token_hex(16), secrets.token_hex(16)
    env = {
        **os.environ,
        "DATABASE_URL": f"postgresql+psycopg://mnemoflow:mfcanary{token}@db.internal:5432/mnemoflow",
        "MNEMOFLOW_OPENAI_API_KEY": f"sk-mfcanary{key}",
        "REDIS_URL": "redis://:hunter2@cache.internal:6379/0",
    }
    digest = hashlib.sha256(token.encode()).hexdigest()
    command = [sys.executable, "-c", "from tests.security.inside import main; main()", "mfcanary", digest]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    seen = found["identity"]
    assert set(seen["environment"]) <= PARSER_ENVIRONMENT, seen["environment"]
    assert seen["environment"]["HOME"] == seen["environment"]["TMPDIR"] == seen["cwd"]
    assert "mfcanary" not in json.dumps(seen) and "hunter2" not in json.dumps(seen)
    # No copy of the database password anywhere in the child's heap, stack or anonymous memory either.
    assert found["holders"] == []


@as_root
def test_each_child_runs_as_an_unprivileged_uid_of_its_own():
    first = run_limited("identity", DOCUMENT_LIMITS, inside.identity)
    second = run_limited("identity", DOCUMENT_LIMITS, inside.identity)
    for seen in (first, second):
        assert seen["uid"] == seen["euid"] == seen["gid"] != 0
        assert DOCUMENT_LIMITS.uid_first <= seen["uid"] < DOCUMENT_LIMITS.uid_first + DOCUMENT_LIMITS.uid_count
        assert seen["groups"] == []
        assert not seen["kernel_environment"] or "unreadable" in seen["kernel_environment"]
    assert first["uid"] != second["uid"] and first["pid"] != second["pid"]
    fixed = dataclasses.replace(DOCUMENT_LIMITS, uid_first=65534, uid_count=1)  # nobody, for every child
    assert run_limited("identity", fixed, inside.identity)["uid"] == 65534


def test_the_child_cannot_connect_to_anything(shared_dir: Path):
    tcp = Canary("::")  # every local address, IPv4 and IPv6
    unix = Canary(unix_path=str(shared_dir / "service.sock"))  # as a database's socket would be
    (shared_dir / "service.sock").chmod(0o777)
    try:
        attempts = {
            "127.0.0.1": run_limited("net", DOCUMENT_LIMITS, inside.connect, "tcp", "127.0.0.1", tcp.port),
            "::1": run_limited("net", DOCUMENT_LIMITS, inside.connect, "tcp", "::1", tcp.port),
            "unix": run_limited("net", DOCUMENT_LIMITS, inside.connect, "unix", str(shared_dir / "service.sock"), 0),
        }
        assert all(outcome.startswith("refused") for outcome in attempts.values()), attempts
        assert tcp.connections == 0 and unix.connections == 0
        # The same connection from here succeeds: the canaries listen, the child is what is cut off.
        assert inside.connect("tcp", "127.0.0.1", tcp.port) == "connected"
        assert wait_until(lambda: tcp.connections == 1)
    finally:
        tcp.close()
        unix.close()


@as_root
def test_the_child_has_a_network_namespace_of_its_own():
    seen = run_limited("identity", DOCUMENT_LIMITS, inside.identity)
    assert seen["network_namespace"] != os.readlink("/proc/self/ns/net")


def test_writing_past_the_file_size_limit_fails():
    limits = dataclasses.replace(DOCUMENT_LIMITS, file_bytes=1 * MIB)
    result = run_limited("write", limits, inside.write_file, 3 * MIB)
    assert result == {"errno": errno.EFBIG, "written": 1 * MIB}
    assert run_limited("write", DOCUMENT_LIMITS, inside.write_file, 3 * MIB) == {"errno": None, "written": 3 * MIB}


def test_core_dumps_are_off_and_cpu_time_is_bounded():
    limits = run_limited("identity", DOCUMENT_LIMITS, inside.identity)["limits"]
    assert limits["RLIMIT_CORE"] == [0, 0]
    assert limits["RLIMIT_AS"] == [DOCUMENT_LIMITS.memory_bytes] * 2
    assert limits["RLIMIT_FSIZE"] == [DOCUMENT_LIMITS.file_bytes] * 2
    assert limits["RLIMIT_CPU"][0] == limits["RLIMIT_CPU"][1] != resource.RLIM_INFINITY


@as_root
def test_the_child_s_uid_cannot_run_more_tasks_than_its_limit():
    limits = dataclasses.replace(DOCUMENT_LIMITS, processes=16)
    assert run_limited("identity", limits, inside.identity)["limits"]["RLIMIT_NPROC"] == [16, 16]
    assert run_limited("threads", limits, inside.start_threads, 32) < 16
    assert run_limited("threads", DOCUMENT_LIMITS, inside.start_threads, 32) == 32


@as_root
def test_parsers_that_start_processes_and_threads_work_under_the_task_limit(tmp_path: Path):
    # pandoc (a process of its own, EPUB and ODT) and transcription (FFmpeg and CTranslate2's threads) need
    # 3 and 6 tasks here; the default limit leaves room for machines with many more cores.
    assert run_limited("identity", DOCUMENT_LIMITS, inside.identity)["limits"]["RLIMIT_NPROC"] == [128, 128]
    epub = extract(samples.pandoc_file(tmp_path / "guide.epub", "epub"), Format.EPUB, limits=DOCUMENT_LIMITS)
    assert "Field Guide" in epub.text
    clip = samples.reencode(samples.speech_wav(tmp_path / "note.wav"), tmp_path / "note.mp4", "mp4")
    assert "remember documents" in extract(clip, Format.MP4, limits=MEDIA_LIMITS).text.lower()


def test_no_child_is_reused_and_nothing_of_one_outlives_it():
    marker = f"marker-{secrets.token_hex(4)}"
    first = run_limited("first", DOCUMENT_LIMITS, inside.leave_behind, marker)
    # Its helpers cannot leave its process group, and whatever it left running is gone with it.
    assert first["session"].startswith("refused"), first["session"]
    assert wait_until(lambda: not alive(first["sleeper"], first["uid"]))
    assert not os.path.exists(first["home"])  # its private directory, its copy of the document, are deleted
    second = run_limited("second", DOCUMENT_LIMITS, inside.look_around, marker, first["home"])
    assert second["home"] != first["home"] and not second["in_my_home"] and not second["other_home_exists"]
    if os.geteuid() == 0:
        assert second["uid"] != first["uid"]


def test_a_child_dies_with_its_worker(shared_dir: Path):
    pid_file = shared_dir / "child.pid"
    script = (
        "from shared.ingest.sandbox import Limits, run_limited\n"
        "from tests.security.inside import sleep_and_report\n"
        f"run_limited('sleeper', Limits(timeout_s=600), sleep_and_report, {str(pid_file)!r})\n"
    )
    worker = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, start_new_session=True)
    try:
        assert wait_until(pid_file.exists, timeout=120), "the child never started"
        child = int(pid_file.read_text())
        uid = int(Path(f"/proc/{child}/status").read_text().split("Uid:")[1].split()[0])
        assert alive(child, uid)
        worker.send_signal(signal.SIGKILL)  # the worker process is lost (OOM killer, a crash)
        worker.wait(30)
        assert wait_until(lambda: not alive(child, uid)), "the parser child outlived its worker"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(30)


def test_an_answer_is_never_unpickled(shared_dir: Path):
    planted = shared_dir / "planted"
    with pytest.raises(ExtractionFailed):
        run_limited("forged", DOCUMENT_LIMITS, inside.send_pickle, str(planted))
    assert not planted.exists()


def test_answers_over_the_output_limit_are_refused():
    limits = dataclasses.replace(DOCUMENT_LIMITS, output_bytes=1 * MIB)
    assert len(run_limited("text", limits, inside.text_of, 1000)) == 1000
    with pytest.raises(ExtractionFailed, match=r"is over the 1 MiB limit") as caught:
        run_limited("text", limits, inside.text_of, 2 * MIB)
    assert caught.value.details["limit"] == "output"
    # A child that skips its own check and announces a huge answer is refused before anything is read.
    with pytest.raises(ExtractionFailed, match=r"1048576\.0 MiB\) is over the 1 MiB limit") as caught:
        run_limited("text", limits, inside.claim_huge_answer)
    assert caught.value.details == {"limit": "output", "output_bytes": 1 << 40}


def _confine_as_unprivileged(strict: bool, port: int) -> dict:
    """confine.apply in a process that is not root (as a worker run under its own user), and a connection try."""
    script = f"""
import encodings.idna, json, os, socket, tempfile
from shared.errors import ServiceUnavailable
from shared.ingest import confine
from tests.security import inside
workdir = tempfile.mkdtemp()
os.chmod(workdir, 0o777)
os.setgroups([])
os.setresgid(4242, 4242, 4242)
os.setresuid(4242, 4242, 4242)
rules = confine.Confinement(workdir, 2**31, 2**28, 600, 64, uid=None, strict={strict})
try:
    report = confine.apply(rules)
except ServiceUnavailable as exc:
    print(json.dumps({{"refused": exc.message}}))
else:
    print(json.dumps({{"network": report.network, "filtered": report.filtered, "uid": report.uid,
                      "connect": inside.connect("tcp", "127.0.0.1", {port})}}))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@as_root  # to become a non-root "worker" here
def test_a_worker_that_is_not_root_still_cuts_its_children_off_and_strict_refuses_the_shared_uid():
    canary = Canary("127.0.0.1")
    try:
        lenient = _confine_as_unprivileged(strict=False, port=canary.port)
        assert lenient["uid"] == 4242 and lenient["filtered"] and lenient["connect"].startswith("refused")
        assert lenient["network"] in ("user and network namespaces", "")  # namespaces where the host allows them
        strict = _confine_as_unprivileged(strict=True, port=canary.port)
        assert "no uid of its own" in strict["refused"]
        assert canary.connections == 0
    finally:
        canary.close()


def test_limits_refuse_nonsense():
    with pytest.raises(InvalidInput, match="must be positive"):
        Limits(output_bytes=0)
