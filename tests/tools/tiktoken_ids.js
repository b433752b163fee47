#!/usr/bin/env node
// Reference token ids from js-tiktoken (an independent implementation of tiktoken's `gpt2`
// encoding), for test_tokenizer to compare our C++ tokenizer against.
//
// Usage: node tiktoken_ids.js FILE... OUTDIR
// Each FILE is read as UTF-8 and encoded as one ordinary string: "<|endoftext|>" in the text
// is plain characters, not the special token. The ids go to OUTDIR/<name>.ids (the file
// name without its extension) as raw little-endian uint32.
//
// js-tiktoken is installed by `npm ci --prefix common/data`.
'use strict';

const fs = require('fs');
const path = require('path');

const TIKTOKEN = path.join(__dirname, '../../common/data/node_modules/js-tiktoken');

function main(argv) {
  if (argv.length < 2) {
    console.error('usage: node tiktoken_ids.js FILE... OUTDIR');
    process.exit(2);
  }
  const inputs = argv.slice(0, -1);
  const outDir = argv[argv.length - 1];

  let tiktoken;
  try {
    tiktoken = require(TIKTOKEN);
  } catch (e) {
    console.error(`error: cannot load js-tiktoken from ${TIKTOKEN} (run: npm ci --prefix common/data): ${e.message}`);
    process.exit(1);
  }
  const enc = tiktoken.getEncoding('gpt2');
  fs.mkdirSync(outDir, { recursive: true });

  for (const file of inputs) {
    if (!fs.existsSync(file)) {
      console.error(`error: input file ${file} not found`);
      process.exit(1);
    }
    const start = process.hrtime.bigint();
    const text = fs.readFileSync(file, 'utf8');
    // allowedSpecial = [] and disallowedSpecial = []: no special tokens, and no error when
    // the text happens to contain "<|endoftext|>".
    const encodeStart = process.hrtime.bigint();
    const ids = enc.encode(text, [], []);
    const encodeSeconds = Number(process.hrtime.bigint() - encodeStart) / 1e9;
    const out = Buffer.alloc(4 * ids.length);
    ids.forEach((id, i) => out.writeUInt32LE(id, 4 * i));
    const name = path.basename(file, path.extname(file)) + '.ids';
    fs.writeFileSync(path.join(outDir, name), out);
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    console.log(`${path.basename(file)}: ${text.length} characters, ${ids.length} tokens, ` +
                `${seconds.toFixed(2)} s (encoding ${encodeSeconds.toFixed(2)} s, ` +
                `${(ids.length / encodeSeconds / 1e6).toFixed(2)}M tokens/s) -> ${path.join(outDir, name)}`);
  }
}

main(process.argv.slice(2));
