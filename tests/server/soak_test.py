#!/usr/bin/env python3
"""A bounded soak of `mtp serve` on loopback: 64 clients for SOAK_SECONDS (default 15) send chat and completion
requests, streamed or not, with random lengths and drafting settings, and hang up on a fifth of their streams
part-way. Every request that was not hung up must succeed; afterwards every slot is free, the queue empty,
the cancelled requests counted, and the prefix cache within its budget. Under `make asan-test` the server is
the sanitized build, so a use-after-free or a leak on any of these paths fails the run.

Usage: soak_test.py MTP_BINARY MODEL
"""
import http.client
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import urllib.request

CLIENTS = 64


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def one_request(port, rng, counts, errors):
    stream = rng.random() < 0.6
    chat = rng.random() < 0.5
    body = {"max_tokens": rng.randint(1, 48), "stream": stream, "temperature": rng.choice([0, 0.8])}
    if chat:
        body["messages"] = [{"role": "user", "content": "tell me " + " ".join(rng.choice(["a", "b", "cd", "efg"]) for _ in range(rng.randint(1, 40)))}]
    else:
        body["prompt"] = "The model " * rng.randint(1, 30)
    spec = rng.random()
    if spec < 0.25:
        body["speculative"] = False
    elif spec < 0.5:
        body["speculative"] = {"n_max": rng.randint(1, 3)}
    hang_up = stream and rng.random() < 0.2
    path = "/v1/chat/completions" if chat else "/v1/completions"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    stage = "connect"
    try:
        conn.connect()
        stage = "send"
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        stage = "response"
        resp = conn.getresponse()
        stage = "body"
        if resp.status != 200:
            errors.append(f"HTTP {resp.status}: {resp.read()[:200]!r}")
            return
        if hang_up:
            resp.read(rng.randint(1, 200))
            conn.sock.shutdown(2)  # hang up mid-stream
            counts["hung_up"] += 1
            return
        data = resp.read().decode()
        if stream and not data.rstrip().endswith("data: [DONE]"):
            errors.append(f"stream without [DONE]: {data[-200:]!r}")
            return
        if not stream and "choices" not in json.loads(data):
            errors.append(f"no choices: {data[:200]!r}")
            return
        counts["ok"] += 1
    except Exception as e:  # noqa: BLE001 - every failure is a finding of the soak
        if not hang_up:
            errors.append(f"{type(e).__name__} at {stage}: {e} ({'stream' if stream else 'whole'} {path}, "
                          f"max_tokens {body['max_tokens']}, speculative {body.get('speculative')})")
    finally:
        conn.close()


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    mtp, model = sys.argv[1:]
    seconds = float(os.environ.get("SOAK_SECONDS", "15"))
    server = subprocess.Popen([mtp, "serve", "-m", model, "--port", "0", "-np", "4", "-c", "4096", "--spec", "mtp",
                               "--spec-policy", "auto", "--cache-ram", "8", "--queue", "128"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = None
        for line in server.stdout:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            print("the server did not start")
            return 1
        counts = {"ok": 0, "hung_up": 0}
        errors = []
        end = time.time() + seconds

        def client(i):
            rng = random.Random(i)
            while time.time() < end:
                one_request(port, rng, counts, errors)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Hung-up requests end when the server notices; give it a moment to free their slots.
        for _ in range(300):
            m = metrics(port)
            if m.get("mtp_slots_busy", 1) == 0 and m.get("mtp_queue_length", 1) == 0:
                break
            time.sleep(0.1)
        problems = list(errors[:10])
        if m.get("mtp_slots_busy") != 0:
            problems.append(f"{m.get('mtp_slots_busy')} slots still busy")
        if m.get("mtp_queue_length") != 0:
            problems.append(f"{m.get('mtp_queue_length')} requests still queued")
        cancelled = m.get('mtp_requests_finished_total{reason="cancelled"}', 0)
        if counts["hung_up"] > 0 and cancelled == 0:
            problems.append(f"{counts['hung_up']} hang-ups but no request counted cancelled")
        if m.get("mtp_prefix_cache_bytes", 0) > m.get("mtp_prefix_cache_budget_bytes", 0):
            problems.append("prefix cache over its budget")
        if counts["ok"] == 0:
            problems.append("no request succeeded")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as r:
            health = json.load(r)
        statuses = {k[k.index("{"):]: int(v) for k, v in m.items() if k.startswith("mtp_requests_total{")}
        print(f"{seconds:.0f} s, {CLIENTS} clients: {counts['ok']} requests ok, {counts['hung_up']} hung up "
              f"({cancelled:.0f} counted cancelled), {len(errors)} errors; health {health}; responses {statuses}")
        for p in problems:
            print("problem:", p)
        return 1 if problems else 0
    finally:
        server.terminate()
        try:
            rc = server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            rc = -9
        if rc not in (0, -15):
            print(f"the server exited with {rc}")
            sys.exit(1)


if __name__ == "__main__":
    sys.exit(main())
