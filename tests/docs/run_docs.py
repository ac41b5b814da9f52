#!/usr/bin/env python3
"""Runs every shell, Python and TypeScript example of the docs against a real tetherd.

Each fenced block of README.md, docs/*.md and the client READMEs whose info
string is ``sh``/``bash``, ``python`` or ``ts``/``js`` is run, in the order
of its file, as a reader would run it in one terminal session per file:

- Shell blocks go to one ``bash`` per file, so a variable, a ``cd`` or a
  function set by one block holds in the next. The block's last command's
  exit status must be 0.
- Python blocks run in one interpreter per file (globals carry from block to
  block, as in a notebook) with the venv's python (``target/py-venv``, where
  ``./python`` is installed). An exception fails the block.
- TypeScript blocks are type-checked and compiled by the client's own
  ``tsc`` (strict) and run as ES modules by node, each on its own, with
  ``@tether/client`` resolving to ``./typescript``. A block that does not
  import ``@tether/client`` gets ``TetherClient``, ``baseUrl`` and ``client``
  (a ``TetherClient`` of the file's server) declared first.

A block followed by a block fenced ```` ```text output ```` must print
exactly that (stdout and stderr together, as a terminal shows them; ``...``
within a line stands for any text, a line of only ``...`` for any lines).

Each file gets its own server: a block marked ``server`` (one that starts
tetherd in the foreground, as in a second terminal) is run in the
background, in the directory the file's shell is in, with
``TETHER_LISTEN`` set to a free loopback port, and serves the blocks after
it (until the next ``server`` block or the end of the file); a file with none gets ``tetherd`` with its
defaults (a generated token) before its first block. Every block sees
``TETHER_SERVER`` (the server's URL), ``XDG_RUNTIME_DIR`` (a private
directory, where the generated token lands) and target/debug first on the
``PATH``; ``127.0.0.1:7420`` and ``localhost:7420`` in a block are replaced
with the server's address, and in shell blocks the word ``ID`` with the id
of the last process whose JSON object an earlier block printed, as a reader
would paste them.

A block marked ``no-run`` is not run (the doc says why beside it); the
runner lists it. Files and lines are listed as they run; the exit status is
1 if any block failed. ``--list`` only lists the blocks; file arguments
narrow the run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/*.md", "client/README.md", "python/README.md", "typescript/README.md", "web-demo/README.md"]
SHELL = {"sh", "bash", "shell"}
PYTHON = {"python", "py"}
NODE = {"ts", "typescript", "js", "javascript"}
BLOCK_TIMEOUT = 300.0
SERVER_START_TIMEOUT = 120.0
TSC_OPTIONS = [
    "--module", "nodenext", "--target", "es2022", "--types", "node",
    "--strict", "--skipLibCheck", "--noEmitOnError", "--pretty", "false",
]
FENCE = re.compile(r"^(\s*)(```+)(.*)$")


@dataclass
class Block:
    path: str
    line: int
    lang: str
    attrs: list[str]
    code: str
    expected: str | None = None

    @property
    def kind(self) -> str | None:
        if self.lang in SHELL:
            return "shell"
        if self.lang in PYTHON:
            return "python"
        if self.lang in NODE:
            return "node"
        return None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def parse(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, each output block attached to the block before it."""
    rel = str(path.relative_to(ROOT))
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    last_end = -10
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.groups()
        words = info.split()
        lang = words[0] if words else ""
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence) and lines[i].strip().strip("`") == ""):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        code = "\n".join(body) + "\n"
        gap = lines[last_end + 1 : start] if last_end >= 0 else ["x"]
        if "output" in words[1:] and blocks and all(not g.strip() for g in gap):
            blocks[-1].expected = code
        else:
            blocks.append(Block(rel, start + 1, lang, words[1:], code))
        last_end = i
        i += 1
    return blocks


def matches(expected: str, actual: str) -> bool:
    """Whether ``actual`` is ``expected`` with each ``...`` standing for any text (a line of it: any lines)."""
    pattern = []
    for line in expected.rstrip("\n").split("\n"):
        if line.strip() == "...":
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            pattern.append(".*?".join(re.escape(part) for part in line.rstrip().split("...")) + r"[ \t]*\n")
    return re.fullmatch("".join(pattern), actual.rstrip("\n") + "\n") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Session:
    """One file's terminal: its server, shell, Python interpreter and scratch space."""

    path: str
    scratch: Path
    env: dict[str, str]
    port: int = 0
    server: subprocess.Popen[bytes] | None = None
    server_pid: int | None = None
    shell: subprocess.Popen[str] | None = None
    python: subprocess.Popen[str] | None = None
    last_id: str | None = None
    seq: int = 0
    logs: list[Path] = field(default_factory=list)

    @classmethod
    def open(cls, path: str) -> Session:
        scratch = Path(tempfile.mkdtemp(prefix="tether-docs-"))
        (scratch / "run").mkdir(mode=0o700)
        env = dict(os.environ)
        env.update(
            XDG_RUNTIME_DIR=str(scratch / "run"),
            PATH=f"{ROOT / 'target/debug'}:{env.get('PATH', '')}",
            NO_COLOR="1",
        )
        for key in ("TETHER_TOKEN", "TETHER_TOKEN_FILE", "TETHER_LISTEN", "TETHER_SERVER"):
            env.pop(key, None)
        session = cls(path, scratch, env)
        session.port = free_port()
        session.env["TETHER_SERVER"] = f"http://127.0.0.1:{session.port}"
        return session

    def substitute(self, code: str) -> str:
        return code.replace("127.0.0.1:7420", f"127.0.0.1:{self.port}").replace("localhost:7420", f"localhost:{self.port}")

    def start_default_server(self) -> None:
        """``tetherd`` with its defaults, for a file that starts no server of its own."""
        log = self.scratch / "server.log"
        self.logs.append(log)
        env = dict(self.env, TETHER_LISTEN=f"127.0.0.1:{self.port}")
        with log.open("wb") as out:
            self.server = subprocess.Popen(
                ["tetherd"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.server_pid = self.server.pid
        self.wait_listening(log)

    def start_server_block(self, code: str) -> None:
        """A ``server`` block: in the background of the file's shell (its directory and variables), as in a second terminal."""
        self.stop_server()
        log = self.scratch / f"server-{len(self.logs)}.log"
        self.logs.append(log)
        pid_file = self.scratch / f"server-{len(self.logs)}.pid"
        self.seq += 1
        script = self.scratch / f"block-{self.seq}.sh"
        script.write_text(code)
        # A session of its own (setsid, which does not fork here: a
        # background job is no group leader), so stop_server ends it whole.
        self.shell_command(
            f"TETHER_LISTEN=127.0.0.1:{self.port} setsid bash --noprofile --norc {script} </dev/null >{log} 2>&1 & "
            f"echo $! >{pid_file}.tmp; mv {pid_file}.tmp {pid_file}"
        )
        deadline = time.monotonic() + 10
        while not pid_file.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("the shell did not start the server block")
            time.sleep(0.02)
        self.server_pid = int(pid_file.read_text())
        self.wait_listening(log)

    def server_alive(self) -> bool:
        if self.server is not None:
            return self.server.poll() is None
        if self.server_pid is None:
            return False
        try:
            os.kill(self.server_pid, 0)
        except ProcessLookupError:
            return False
        # A zombie until the file's shell reaps it: dead all the same.
        try:
            return Path(f"/proc/{self.server_pid}/stat").read_text().split(") ")[1][0] != "Z"
        except (OSError, IndexError):
            return False

    def wait_listening(self, log: Path) -> None:
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while time.monotonic() < deadline:
            if not self.server_alive():
                raise RuntimeError(f"the server exited before listening:\n{log.read_text(errors='replace')}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"the server did not listen within {SERVER_START_TIMEOUT} s:\n{log.read_text(errors='replace')}")

    def stop_server(self) -> None:
        """Ends the server's process group: SIGTERM, then SIGKILL after 30 s."""
        if self.server_pid is None:
            return
        pid, self.server_pid = self.server_pid, None
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                break
            if self.server is not None:
                self.server.poll()
            time.sleep(0.05)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        if self.server is not None:
            self.server.wait()
            self.server = None

    def shell_command(self, line: str) -> None:
        if self.shell is None:
            self.shell = subprocess.Popen(
                ["bash", "--noprofile", "--norc"],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
        assert self.shell.stdin is not None
        self.shell.stdin.write(line + "\n")
        self.shell.stdin.flush()

    def run_shell(self, code: str) -> tuple[int, str]:
        self.seq += 1
        script = self.scratch / f"block-{self.seq}.sh"
        out = self.scratch / f"block-{self.seq}.out"
        status = self.scratch / f"block-{self.seq}.status"
        script.write_text(code)
        # Sourced, so that the session's variables and directory carry on;
        # stdin from /dev/null, so that a block never reads the runner's.
        self.shell_command(f"source {script} </dev/null >{out} 2>&1; echo $? >{status}.tmp; mv {status}.tmp {status}")
        assert self.shell is not None
        deadline = time.monotonic() + BLOCK_TIMEOUT
        while not status.exists():
            if self.shell.poll() is not None:
                return 255, (out.read_text(errors="replace") if out.exists() else "") + "\n(the shell exited)"
            if time.monotonic() > deadline:
                # Everything the block started is in the shell's session.
                self.kill_shell()
                return 255, out.read_text(errors="replace") + f"\n(timed out after {BLOCK_TIMEOUT} s)"
            time.sleep(0.02)
        return int(status.read_text().strip() or "255"), out.read_text(errors="replace")

    def kill_shell(self) -> None:
        if self.shell is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.shell.pid, signal.SIGKILL)
            self.shell.wait()
            self.shell = None

    def run_python(self, code: str) -> tuple[int, str]:
        if self.python is None:
            self.python = subprocess.Popen(
                [str(ROOT / "target/py-venv/bin/python"), "-u", str(Path(__file__).with_name("python_session.py"))],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        assert self.python.stdin is not None and self.python.stdout is not None
        self.python.stdin.write(json.dumps({"code": code}) + "\n")
        self.python.stdin.flush()
        answer = self.python.stdout.readline()
        if not answer:
            return 255, "(the Python session exited)"
        result = json.loads(answer)
        return int(result["status"]), str(result["output"])

    def run_node(self, code: str) -> tuple[int, str]:
        project = self.scratch / "node"
        if not project.exists():
            modules = project / "node_modules"
            (modules / "@tether").mkdir(parents=True)
            (modules / "@tether" / "client").symlink_to(ROOT / "typescript")
            (modules / "@types").mkdir()
            for types in ("node", "ws"):
                (modules / "@types" / types).symlink_to(ROOT / "typescript/node_modules/@types" / types)
            for dep in ("ws", "@msgpack", "undici-types"):
                (modules / dep).symlink_to(ROOT / "typescript/node_modules" / dep)
            (project / "package.json").write_text('{"type": "module"}\n')
        if not re.search(r"""from\s+["']@tether/client["']""", code):
            # What the doc's prose gives a fragment: the client and the
            # server's URL, unless the block declares them itself.
            prelude = ['import { TetherClient } from "@tether/client";']
            if not re.search(r"\b(const|let|var)\s+baseUrl\b", code):
                prelude.append("const baseUrl = process.env.TETHER_SERVER!;")
            if not re.search(r"\b(const|let|var)\s+client\b", code):
                prelude.append("const client = new TetherClient(baseUrl);")
            imports = [line for line in code.splitlines(keepends=True) if line.startswith("import ")]
            rest = [line for line in code.splitlines(keepends=True) if not line.startswith("import ")]
            code = "".join(imports) + "\n".join(prelude) + "\n" + "".join(rest)
        self.seq += 1
        source = project / f"block-{self.seq}.ts"
        source.write_text(code)
        # Type-checked against the client's declarations, as a reader's
        # editor would, then run.
        compiled = subprocess.run(
            [str(ROOT / "typescript/node_modules/.bin/tsc"), *TSC_OPTIONS, "--outDir", str(project / "out"), source.name],
            cwd=project,
            capture_output=True,
            text=True,
        )
        if compiled.returncode != 0:
            return compiled.returncode, "tsc: " + compiled.stdout + compiled.stderr
        try:
            ran = subprocess.run(
                ["node", str(project / "out" / source.with_suffix(".js").name)],
                cwd=project,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=BLOCK_TIMEOUT,
            )
        except subprocess.TimeoutExpired as e:
            return 255, f"{e.output or ''}\n(timed out after {BLOCK_TIMEOUT} s)"
        return ran.returncode, ran.stdout

    def close(self) -> None:
        self.stop_server()
        for proc in (self.shell, self.python):
            if proc is not None:
                if proc.stdin is not None:
                    proc.stdin.close()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                # Whatever a block left running in the session ends with it.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)


ID_IN_OUTPUT = re.compile(r'"id"\s*:\s*"([A-Za-z0-9.-]+)"')


def run_file(blocks: list[Block]) -> list[tuple[Block, str, str]]:
    """Runs one file's blocks; returns (block, verdict, detail) for each."""
    results: list[tuple[Block, str, str]] = []
    session = Session.open(blocks[0].path)
    try:
        if not any(b.kind == "shell" and "server" in b.attrs and "no-run" not in b.attrs for b in blocks):
            if any(b.kind and "no-run" not in b.attrs for b in blocks):
                session.start_default_server()
        for block in blocks:
            if block.kind is None:
                continue
            if "no-run" in block.attrs:
                results.append((block, "skip", "marked no-run"))
                report(block, "skip", "")
                continue
            code = session.substitute(block.code)
            began = time.monotonic()
            if block.kind == "shell" and "server" in block.attrs:
                try:
                    session.start_server_block(code)
                    status, output = 0, ""
                except RuntimeError as e:
                    status, output = 1, str(e)
            elif block.kind == "shell":
                if session.last_id is not None:
                    code = re.sub(r"\bID\b", session.last_id, code)
                status, output = session.run_shell(code)
            elif block.kind == "python":
                status, output = session.run_python(code)
            else:
                status, output = session.run_node(code)
            ids = ID_IN_OUTPUT.findall(output)
            if ids:
                session.last_id = ids[-1]
            took = time.monotonic() - began
            problem = ""
            if status != 0:
                problem = f"exit status {status}"
            elif block.expected is not None and not matches(block.expected, output):
                problem = "output differs from the doc"
            if problem:
                detail = f"{problem}\n--- expected ---\n{block.expected or '(any)'}--- got ---\n{output}"
                if session.logs and not session.server_alive():
                    detail += f"\n--- server log ---\n{session.logs[-1].read_text(errors='replace')}"
                results.append((block, "FAIL", detail))
                report(block, "FAIL", f"{took:.1f} s", detail)
            else:
                checked = "output checked" if block.expected is not None else "exit status checked"
                results.append((block, "ok", checked))
                report(block, "ok", f"{took:.1f} s, {checked}")
    finally:
        session.close()
    return results


def report(block: Block, verdict: str, note: str, detail: str = "") -> None:
    print(f"{verdict:4} {block.where} ({block.lang}{' ' + ' '.join(block.attrs) if block.attrs else ''}) {note}", flush=True)
    if detail:
        print("     " + detail.replace("\n", "\n     "), flush=True)


def doc_files(only: list[str]) -> list[Path]:
    files: list[Path] = []
    for pattern in DOCS:
        files.extend(sorted(ROOT.glob(pattern)))
    if only:
        wanted = {(Path.cwd() / o).resolve() for o in only}
        files = [f for f in files if f.resolve() in wanted]
    return files


def main() -> int:
    # SIGTERM (a CI timeout, a kill) unwinds like Ctrl-C: each file's
    # servers, shell and interpreter are ended by its ``finally``.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="only these Markdown files")
    parser.add_argument("--list", action="store_true", help="list the blocks without running them")
    args = parser.parse_args()
    all_results: list[tuple[Block, str, str]] = []
    for path in doc_files(args.files):
        blocks = [b for b in parse(path) if b.kind is not None]
        if not blocks:
            continue
        if args.list:
            for b in blocks:
                print(f"{b.where} {b.lang} {' '.join(b.attrs)}{' (output checked)' if b.expected else ''}")
            continue
        print(f"== {path.relative_to(ROOT)}", flush=True)
        all_results.extend(run_file(blocks))
    if args.list:
        return 0
    failed = [r for r in all_results if r[1] == "FAIL"]
    ran = [r for r in all_results if r[1] != "skip"]
    skipped = [r for r in all_results if r[1] == "skip"]
    checked = [r for r in ran if r[2] == "output checked"]
    print(
        f"\n{len(ran)} examples run ({len(checked)} with their output checked), "
        f"{len(failed)} failed, {len(skipped)} marked no-run"
    )
    for block, _, _ in failed:
        print(f"FAILED {block.where}")
    if not ran:
        print("no example ran: the runner found nothing to check")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
