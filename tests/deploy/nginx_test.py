#!/usr/bin/env python3
"""deploy/nginx-mtp.conf in front of two `mtp serve` replicas on loopback: requests spread over both, a
session's turns stick to one replica, and a replica going down is routed around.

Usage: nginx_test.py MTP_BINARY MODEL NGINX_CONF_TEMPLATE
Exit 77 (ctest: skipped) when nginx is not installed (`make test` installs it).
"""
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url, proc, seconds=120):
    end = time.time() + seconds
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {seconds} s")


def complete(port, session=None):
    """A short chat completion through nginx; the replica that answered, from X-Mtp-Replica."""
    body = json.dumps({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    if session is not None:
        req.add_header("X-Session-Id", session)
    with urllib.request.urlopen(req, timeout=60) as r:
        reply = json.load(r)
        assert reply["choices"][0]["message"]["content"] is not None, reply
        # After a failover the header lists every replica tried ("A, B"): the last one answered.
        return r.headers["X-Mtp-Replica"].split(",")[-1].strip()


def main():
    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    mtp, model, template = sys.argv[1:]
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if nginx is None:
        print("nginx is not installed: skipped")
        return 77
    work = pathlib.Path(tempfile.mkdtemp(prefix="mtp-nginx-"))
    os.chmod(work, 0o777)  # nginx workers run as nobody when the master is root
    procs = []
    try:
        ports = [free_port(), free_port()]
        replicas = {}
        for p in ports:
            proc = subprocess.Popen([mtp, "serve", "-m", model, "--host", "127.0.0.1", "--port", str(p), "-np", "2",
                                     "-c", "1024", "-t", "1"], stdout=subprocess.DEVNULL,
                                    stderr=open(work / f"replica-{p}.log", "w"))
            procs.append(proc)
            replicas[f"127.0.0.1:{p}"] = proc
        front = free_port()
        conf = pathlib.Path(template).read_text()
        conf = conf.replace("127.0.0.1:8081", f"127.0.0.1:{ports[0]}").replace("127.0.0.1:8082", f"127.0.0.1:{ports[1]}")
        conf = conf.replace("listen 127.0.0.1:8080;", f"listen 127.0.0.1:{front};")
        (work / "nginx.conf").write_text(
            f"pid {work}/nginx.pid;\nerror_log {work}/error.log;\nevents {{}}\nhttp {{\n"
            f"access_log off;\nclient_body_temp_path {work};\nproxy_temp_path {work};\n{conf}\n}}\n")
        proc = subprocess.Popen([nginx, "-p", str(work), "-c", str(work / "nginx.conf"), "-g", "daemon off;"],
                                stderr=open(work / "nginx.stderr", "w"))
        procs.append(proc)
        for p in ports:
            wait_for(f"http://127.0.0.1:{p}/health", replicas[f"127.0.0.1:{p}"])
        wait_for(f"http://127.0.0.1:{front}/health", proc)

        # Spread: 24 sessions land on both replicas.
        by_session = {f"session-{i}": complete(front, f"session-{i}") for i in range(24)}
        used = set(by_session.values())
        assert used == set(replicas), f"24 sessions used only {used}"
        # Stickiness: each of 6 sessions' next turns reach the replica of its first turn.
        for s in list(by_session)[:6]:
            for _ in range(3):
                got = complete(front, s)
                assert got == by_session[s], f"{s} moved from {by_session[s]} to {got}"
        # Failover: stop one replica; its sessions are served by the other, the other's stay.
        down = by_session["session-0"]
        replicas[down].send_signal(signal.SIGTERM)
        replicas[down].wait(timeout=30)
        up = (set(replicas) - {down}).pop()
        for s, first in list(by_session.items())[:12]:
            got = complete(front, s)
            assert got == up, f"{s} (first on {first}) answered by {got} with {down} down"
        print(f"spread over {sorted(used)}; 6 sessions stuck for 3 turns; with {down} down, 12 sessions served by {up}")
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
