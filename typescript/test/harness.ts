// Test support: a real tetherd on an ephemeral loopback port, and TCP/HTTP
// fronts that misbehave on purpose. Nothing here mocks the server.
//
//   TETHERD_BIN   tetherd to run (default ../target/debug/tetherd)

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer as createHttpServer, request as httpRequest } from "node:http";
import { connect, createServer, type Server, type Socket } from "node:net";
import { dirname, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
/** The repository root (tests run from typescript/test-dist/). */
export const repoRoot = resolve(here, "../..");
const tetherd = resolve(repoRoot, "typescript", process.env.TETHERD_BIN ?? "../target/debug/tetherd");

/** A running tetherd. */
export interface TestServer {
  url: string;
  port: number;
  child: ChildProcess;
  stop(): Promise<void>;
}

/** Starts tetherd on 127.0.0.1:0 with extra flags; resolves with the URL it prints. */
export async function startServer(extraArgs: string[] = []): Promise<TestServer> {
  if (!existsSync(tetherd)) throw new Error(`tetherd not found at ${tetherd}: cargo build -p tether-server, or set TETHERD_BIN`);
  // Tests that are not about tokens run without one (tetherd would generate one).
  const tokenArgs = extraArgs.includes("--token") ? [] : ["--no-token"];
  const child = spawn(tetherd, ["--listen", "127.0.0.1:0", ...tokenArgs, ...extraArgs], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn" },
  });
  const url = await new Promise<string>((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error("tetherd printed no 'listening on' line within 10 s")), 10_000);
    child.once("exit", (code) => reject(new Error(`tetherd exited early with ${code}`)));
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const match = /tetherd listening on (http:\/\/\S+)/.exec(line);
      if (match) {
        clearTimeout(timer);
        resolveUrl(match[1]!.replace(/\/$/, ""));
      }
    });
  });
  return {
    url,
    port: Number(new URL(url).port),
    child,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** A TCP proxy to a port whose connections the test can cut, as a network failure would. */
export interface CuttingProxy {
  url: string;
  /** Connections accepted so far. */
  readonly accepted: number;
  /** The request line of every connection accepted, in order. */
  readonly requests: string[];
  /** Resets every open connection (both sides). */
  cut(): void;
  /** Stops forwarding on every open connection without closing it: a network gone silent. New connections are forwarded. */
  stall(): void;
  /** Refuses (resets) new connections until {@link CuttingProxy.restore}. */
  refuse(): void;
  restore(): void;
  close(): Promise<void>;
}

export async function startCuttingProxy(targetPort: number): Promise<CuttingProxy> {
  const pairs = new Set<[Socket, Socket]>();
  let accepted = 0;
  let refusing = false;
  const requests: string[] = [];
  const server: Server = createServer((client) => {
    if (refusing) return client.resetAndDestroy();
    accepted += 1;
    client.once("data", (chunk: Buffer) => requests.push(chunk.toString("latin1").split("\r\n")[0] ?? ""));
    const upstream = connect(targetPort, "127.0.0.1");
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    const end = () => {
      client.destroy();
      upstream.destroy();
      pairs.delete(pair);
    };
    for (const socket of pair) socket.on("error", end).on("close", end);
    client.pipe(upstream).pipe(client);
  });
  const port = await listenOnLoopback(server);
  return {
    url: `http://127.0.0.1:${port}`,
    get accepted() {
      return accepted;
    },
    requests,
    cut() {
      for (const [client, upstream] of pairs) {
        client.resetAndDestroy();
        upstream.destroy();
      }
    },
    stall() {
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    },
    refuse() {
      refusing = true;
    },
    restore() {
      refusing = false;
    },
    close: () =>
      new Promise<void>((r) => {
        for (const [client, upstream] of pairs) {
          client.destroy();
          upstream.destroy();
        }
        server.close(() => r());
      }),
  };
}

/** An HTTP front that answers 503 to the first `failures` requests whose path matches, and forwards the rest. */
export interface FlakyFront {
  url: string;
  /** Requests answered with 503 so far. */
  readonly refused: number;
  close(): Promise<void>;
}

export async function startFlakyFront(targetPort: number, failures: number, match: RegExp): Promise<FlakyFront> {
  let refused = 0;
  const server = createHttpServer((req, res) => {
    if (refused < failures && match.test(req.url ?? "")) {
      refused += 1;
      res.writeHead(503, { "Content-Type": "text/plain" }).end("front: upstream unavailable");
      return;
    }
    const upstream = httpRequest(
      { host: "127.0.0.1", port: targetPort, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
  });
  const port = await listenOnLoopback(server);
  return {
    url: `http://127.0.0.1:${port}`,
    get refused() {
      return refused;
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/**
 * An HTTP front that forwards every request but, for the first `losses`
 * whose method and path match, drops the connection instead of passing the
 * answer back: the request took effect and its answer was lost.
 */
export interface LossyFront {
  url: string;
  /** Answers dropped so far. */
  readonly lost: number;
  close(): Promise<void>;
}

export async function startLossyFront(targetPort: number, losses: number, method: string, match: RegExp): Promise<LossyFront> {
  let lost = 0;
  const server = createHttpServer((req, res) => {
    const upstream = httpRequest(
      { host: "127.0.0.1", port: targetPort, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        if (lost < losses && req.method === method && match.test(req.url ?? "")) {
          lost += 1;
          answer.resume();
          res.socket?.destroy();
          return;
        }
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
  });
  const port = await listenOnLoopback(server);
  return {
    url: `http://127.0.0.1:${port}`,
    get lost() {
      return lost;
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/**
 * A TCP proxy whose first `losses` connections lose the server's answer:
 * the request is forwarded (and takes effect), and the client's side is
 * reset as the answer's first byte arrives. Later connections pass through.
 */
export interface AnswerLosingProxy {
  url: string;
  /** Answers lost so far. */
  readonly lost: number;
  /** The request line of every connection, in order. */
  readonly requests: string[];
  close(): Promise<void>;
}

export async function startAnswerLosingProxy(targetPort: number, losses: number): Promise<AnswerLosingProxy> {
  const sockets = new Set<Socket>();
  const requests: string[] = [];
  let lost = 0;
  const server: Server = createServer((client) => {
    const upstream = connect(targetPort, "127.0.0.1");
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
    }
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
    client.once("data", (chunk: Buffer) => requests.push(chunk.toString("latin1").split("\r\n")[0] ?? ""));
    client.pipe(upstream);
    if (lost < losses) {
      lost += 1;
      upstream.once("data", () => {
        client.resetAndDestroy();
        upstream.destroy();
      });
    } else {
      upstream.pipe(client);
    }
  });
  const port = await listenOnLoopback(server);
  return {
    url: `http://127.0.0.1:${port}`,
    get lost() {
      return lost;
    },
    requests,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

/** A loopback port with nothing listening (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  const port = await listenOnLoopback(server);
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

/** Rejects if `promise` takes longer than `ms`: a bound that turns a hang into a failure. */
export async function within<T>(ms: number, promise: Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const bound = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: no result within ${ms} ms`)), ms)));
  try {
    return await Promise.race([promise, bound]);
  } finally {
    clearTimeout(timer);
  }
}

/** Starts `server` on a free loopback port and returns the port. */
export async function listenOnLoopback(server: { listen(port: number, host: string, done: () => void): unknown; address(): unknown }): Promise<number> {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return (server.address() as { port: number }).port;
}

/** A process holding an exclusive `flock` on a file, as a tetherd holds one on its runtime entry for its life. */
export interface HeldLock {
  /** Ends the holder: the lock is free once this resolves. */
  release(): Promise<void>;
}

/**
 * Takes an exclusive `flock` on `path` in a child process (Node has no
 * `flock`): util-linux's `flock -F` (it execs its command, so one process
 * holds the lock), else a python3 one-liner. Resolves once it is held.
 */
export async function holdFlock(path: string): Promise<HeldLock> {
  const script = "echo locked; exec sleep 120";
  const hasFlock = spawnSync("flock", ["--version"], { stdio: "ignore" }).status === 0;
  const child = hasFlock
    ? spawn("flock", ["-x", "-n", "-F", path, "sh", "-c", script], { stdio: ["ignore", "pipe", "inherit"] })
    : spawn(
        "python3",
        ["-c", "import fcntl,sys,time\nf=open(sys.argv[1])\nfcntl.flock(f,fcntl.LOCK_EX|fcntl.LOCK_NB)\nprint('locked',flush=True)\ntime.sleep(120)", path],
        { stdio: ["ignore", "pipe", "inherit"] },
      );
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  await within(
    10_000,
    new Promise<void>((resolveLocked, reject) => {
      child.once("error", reject);
      child.once("exit", (code) => reject(new Error(`the lock holder exited with ${code} (flock(1) or python3 needed)`)));
      createInterface({ input: child.stdout! }).on("line", (line) => line === "locked" && resolveLocked());
    }),
    `locking ${path}`,
  );
  return {
    release: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
  };
}
