"""Drives a tetherd with the Kubernetes Python client (the `kubernetes`
package from PyPI), as a program written for Kubernetes would, and prints
what it observed as one JSON object; tests/tests/kube/ asserts on it.

Usage: python_client.py SERVER_URL SCENARIO [TOKEN]
Scenarios:
  pipes   exec with separate stdout and stderr, stdin written and closed,
          exit code 3
  tty     exec on a terminal, resized twice through channel 4
Every wait is bounded (BOUND seconds); a bound that runs out is reported
in the JSON, never waited past.
"""

import json
import sys
import time

from kubernetes import client
from kubernetes.stream import stream

BOUND = 20.0
RESIZE_CHANNEL = 4


def api(url, token):
    configuration = client.Configuration()
    configuration.host = url
    if token:
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
    return client.CoreV1Api(client.ApiClient(configuration))


def read_until(resp, needle):
    """Reads stdout until it contains `needle` (bounded); returns it all."""
    seen = ""
    deadline = time.time() + BOUND
    while needle not in seen and resp.is_open() and time.time() < deadline:
        resp.update(timeout=deadline - time.time())
        seen += resp.read_stdout(timeout=0) or ""
    return seen


def pipes(core):
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        "builder",
        "ci",
        container="job",
        command=["sh", "-c", "echo out; echo err >&2; cat; exit 3"],
        stdin=True,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
    )
    subprotocol = resp.subprotocol
    resp.write_stdin("hello from python\n")
    resp.close_channel(0)
    stdout, stderr = "", ""
    deadline = time.time() + BOUND
    while resp.is_open() and time.time() < deadline:
        resp.update(timeout=deadline - time.time())
        stdout += resp.read_stdout(timeout=0) or ""
        stderr += resp.read_stderr(timeout=0) or ""
    still_open = resp.is_open()
    returncode = None if still_open else resp.returncode
    resp.close()
    return {
        "subprotocol": subprotocol,
        "stdout": stdout,
        "stderr": stderr,
        "returncode": returncode,
        "timed_out": still_open,
    }


def tty(core):
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        "term",
        "default",
        command=["sh", "-c", "read a; stty size; read b; stty size; exit 0"],
        stdin=True,
        stdout=True,
        stderr=False,
        tty=True,
        _preload_content=False,
    )
    # Channel 4 and stdin are carried out in order, so each size is set
    # before the line that makes the program print it.
    resp.write_channel(RESIZE_CHANNEL, json.dumps({"Width": 100, "Height": 30}))
    resp.write_stdin("one\n")
    first = read_until(resp, "30 100")
    resp.write_channel(RESIZE_CHANNEL, json.dumps({"Width": 120, "Height": 40}))
    resp.write_stdin("two\n")
    second = read_until(resp, "40 120")
    deadline = time.time() + BOUND
    while resp.is_open() and time.time() < deadline:
        resp.update(timeout=deadline - time.time())
    still_open = resp.is_open()
    returncode = None if still_open else resp.returncode
    resp.close()
    return {
        "subprotocol": resp.subprotocol,
        "first": first,
        "second": second,
        "returncode": returncode,
        "timed_out": still_open,
    }


def main():
    url, scenario = sys.argv[1], sys.argv[2]
    token = sys.argv[3] if len(sys.argv) > 3 else None
    core = api(url, token)
    result = {"pipes": pipes, "tty": tty}[scenario](core)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
