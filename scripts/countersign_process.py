"""Helpers shared by the scripts: start `countersign serve` and call its API."""
import base64
import http.client
import json
import os
import subprocess
import sys
import threading
import time


def start_server(binary, data_dir, database=None, stderr=subprocess.DEVNULL, log_level="warning", cpus=None, rate_limits="off"):
    """Starts `countersign serve` on a free port; returns (process, port) once it listens.
    `cpus` (e.g. "0") pins it to those cores with taskset. Rate limits are off: the scripts
    load the server from one address on purpose."""
    command = [binary, "serve", "--data-dir", data_dir, "--port", "0", "--log-level", log_level, "--rate-limits", rate_limits]
    if database:
        command += ["--database", database]
    return start_listening(command, stderr, cpus)


def start_listening(command, stderr=subprocess.DEVNULL, cpus=None):
    """Starts a server that prints `listening on http://HOST:PORT`; returns (process, port)."""
    if cpus is not None:
        command = ["taskset", "-c", cpus] + command
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if line.startswith("listening on http://"):
            # Keep draining stdout so the server never blocks on a full pipe.
            threading.Thread(target=process.stdout.read, daemon=True).start()
            return process, int(line.strip().rsplit(":", 1)[1])
    process.kill()
    sys.exit("error: the server did not start")


def app_keys(data_dir):
    """(public key, secret key) of the first app in DATA/countersign.json."""
    app = json.load(open(os.path.join(data_dir, "countersign.json")))["apps"][0]
    return app["publicApiKeys"][0], app["secretApiKeys"][0]


def call(connection, method, path, key, body=None):
    """One request with a bearer key and a fresh nonce; returns (status, body bytes)."""
    headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json",
               "X-Nonce": base64.b64encode(os.urandom(12)).decode()}
    connection.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    response = connection.getresponse()
    return response.status, response.read()


def connect(port):
    return http.client.HTTPConnection("127.0.0.1", port, timeout=30)
