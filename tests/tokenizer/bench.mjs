// The JavaScript side of bench-tokenize (tests/bench/bench_tokenize.c; issue 25): encodes the
// documents of DOCS.jsonl (one {"text": ...} a line) with the reference implementation
// (@lenml/tokenizers, from CACHE as tests/tokenizer/fetch.sh laid it out) and prints one line
// per model: "MODEL BYTES SECONDS IDS" (SECONDS: CPU time, user + system). One warm-up pass over the first documents, then one
// timed pass over all of them, each document encoded alone without special tokens.
//
//   node tests/tokenizer/bench.mjs CACHE DOCS.jsonl MODEL...
import fs from "node:fs";
import { loadLenml, loadTokenizer } from "./reference.mjs";

const [cache, docsFile, ...models] = process.argv.slice(2);
const docs = fs.readFileSync(docsFile, "utf8").split("\n").filter((l) => l.length)
  .map((l) => JSON.parse(l).text);
const bytes = docs.reduce((s, d) => s + Buffer.byteLength(d, "utf8"), 0);
const lib = await loadLenml(cache);
for (const model of models) {
  const tok = loadTokenizer(lib, cache, model);
  for (const d of docs.slice(0, 500))
    tok.encode(d, { add_special_tokens: false });
  let ids = 0;
  const t0 = process.cpuUsage();   // CPU time (user + system), as bench-tokenize measures C
  for (const d of docs)
    ids += tok.encode(d, { add_special_tokens: false }).length;
  const t = process.cpuUsage(t0);
  const s = (t.user + t.system) / 1e6;
  console.log(`${model} ${bytes} ${s} ${ids}`);
}
