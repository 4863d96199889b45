// The reference ids of the tokenizer comparison (issue 25; docs/tokenizer.md "Checked against").
//
//   node tests/tokenizer/reference.mjs CACHE [OUTDIR]
//
// CACHE is the directory fetch.sh filled: CACHE/node_modules (the JavaScript implementation of
// the Hugging Face tokenizers, @lenml/tokenizers, a fork of transformers.js) and
// CACHE/models/<model>/{tokenizer.json,tokenizer_config.json}. For every model and every string
// of strings.jsonl (beside this script) it writes OUTDIR/<model>.jsonl (default: expected/ beside
// this script), one JSON object a line:
//   {"name", "text": hex of the UTF-8 bytes,
//    "ids": encode(text) (add_special_tokens: true),
//    "ids_nospecial": encode(text, add_special_tokens: false),
//    "decoded": hex of decode(ids, skip_special_tokens: false),
//    "decoded_skip": hex of decode(ids, skip_special_tokens: true)}
// Decoding never applies clean_up_tokenization_spaces (a cosmetic pass of the Python library
// that breaks round trips; sq_tokenizer_decode does not apply it). Texts are hex so that C reads
// them byte for byte (a NUL included).
//
// With SEQUOIA_TOKREF_SECOND=1 and @huggingface/transformers installed in CACHE, the same strings
// are encoded by it too and every disagreement is printed (a second opinion; nothing written).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

export const MODELS = ["qwen3", "llama3_1", "llama2", "gemma3"];

const here = path.dirname(fileURLToPath(import.meta.url));
const hex = (s) => Buffer.from(s, "utf8").toString("hex");

export async function loadLenml(cache) {
  const req = createRequire(path.join(path.resolve(cache), "package.json"));
  return import(pathToFileURL(req.resolve("@lenml/tokenizers")).href);
}

export function loadTokenizer(lib, cache, model) {
  const dir = path.join(cache, "models", model);
  return lib.TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
    tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
  });
}

async function main() {
  const cache = process.argv[2];
  if (!cache) {
    console.error("usage: node reference.mjs CACHE [OUTDIR]");
    process.exit(64);
  }
  const outdir = process.argv[3] ?? path.join(here, "expected");
  fs.mkdirSync(outdir, { recursive: true });
  const strings = fs.readFileSync(path.join(here, "strings.jsonl"), "utf8").split("\n")
    .filter((l) => l.length).map((l) => JSON.parse(l));
  const lib = await loadLenml(cache);
  let second = null;
  if (process.env.SEQUOIA_TOKREF_SECOND === "1") {
    const req = createRequire(path.join(path.resolve(cache), "package.json"));
    second = await import(pathToFileURL(req.resolve("@huggingface/transformers")).href);
    second.env.allowRemoteModels = false;
    second.env.localModelPath = path.join(path.resolve(cache), "models") + "/";
  }
  for (const model of MODELS) {
    const tok = loadTokenizer(lib, cache, model);
    const tok2 = second ? await second.AutoTokenizer.from_pretrained(model) : null;
    const lines = [];
    let disagree = 0;
    for (const s of strings) {
      const ids = tok.encode(s.text);
      const ids_nospecial = tok.encode(s.text, { add_special_tokens: false });
      // (the library refuses to decode an empty list: its text is empty)
      const dec = (skip) => ids.length === 0 ? "" :
        tok.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false });
      const decoded = dec(false), decoded_skip = dec(true);
      lines.push(JSON.stringify({ name: s.name, text: hex(s.text), ids, ids_nospecial,
                                  decoded: hex(decoded), decoded_skip: hex(decoded_skip) }));
      if (tok2) {
        const a = JSON.stringify(tok2.encode(s.text));
        const b = JSON.stringify(tok2.encode(s.text, { add_special_tokens: false }));
        if (a !== JSON.stringify(ids) || b !== JSON.stringify(ids_nospecial)) {
          disagree++;
          console.log(`${model}: ${s.name}: @huggingface/transformers ${a} vs @lenml ${JSON.stringify(ids)}`);
        }
      }
    }
    fs.writeFileSync(path.join(outdir, model + ".jsonl"), lines.join("\n") + "\n");
    console.log(`${model}: ${strings.length} strings${tok2 ? `, ${disagree} disagreements with @huggingface/transformers` : ""}`);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href)
  await main();
