// The TypeScript client's exec rate, for exec_rate.py: node exec_rate.mjs
// BASE_URL TOTAL INFLIGHT prints {"rate": commands per second}. Run from
// typescript/ (the built client in dist/).
import { TetherClient } from "../../typescript/dist/node.js";

const [base, totalArg, inflightArg] = process.argv.slice(2);
const client = new TetherClient(base);
let remaining = Number(totalArg);
const worker = async () => {
  while (remaining > 0) {
    remaining -= 1;
    const out = await client.exec("true");
    if (out.exitCode !== 0) throw new Error(`exit ${out.exitCode}`);
  }
};
const began = performance.now();
await Promise.all(Array.from({ length: Number(inflightArg) }, worker));
console.log(JSON.stringify({ rate: Number(totalArg) / ((performance.now() - began) / 1000) }));
