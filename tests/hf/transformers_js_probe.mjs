// Load an `alilama export onnx` folder with transformers.js in Node, offline, and print what it computes.
//
//   node transformers_js_probe.mjs TRANSFORMERS_JS_DIR FOLDER INPUT.json
//
// TRANSFORMERS_JS_DIR holds node_modules/@huggingface/transformers (`make transformers-js`). INPUT.json:
// {"text", "ids" (rows of token ids), "prompt" (ids), "max_new_tokens", "eot"}. Prints one JSON object:
// the tokenizer's ids of "text", the logits of "ids" (flattened, with their shape) and greedy ids after "prompt".
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [jsDir, folder, inputFile] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(jsDir), "probe.cjs"));
const { env, AutoModelForCausalLM, AutoTokenizer, Tensor } = require("@huggingface/transformers");
const input = JSON.parse(readFileSync(inputFile, "utf8"));

env.allowRemoteModels = false; // offline: the folder or nothing
env.localModelPath = path.dirname(path.resolve(folder)) + path.sep;
const name = path.basename(path.resolve(folder));
const tokenizer = await AutoTokenizer.from_pretrained(name);
const model = await AutoModelForCausalLM.from_pretrained(name, { dtype: "fp32" });

const ids = (rows) => new Tensor("int64", BigInt64Array.from(rows.flat().map(BigInt)), [rows.length, rows[0].length]);
const ones = (rows) => new Tensor("int64", new BigInt64Array(rows.length * rows[0].length).fill(1n), [rows.length, rows[0].length]);
const { logits } = await model({ input_ids: ids(input.ids), attention_mask: ones(input.ids) });
const generated = await model.generate({
  inputs: ids([input.prompt]),
  attention_mask: ones([input.prompt]),
  max_new_tokens: input.max_new_tokens,
  do_sample: false,
  eos_token_id: input.eot,
});
let greedy = Array.from(generated.data, Number).slice(input.prompt.length);
if (input.eot !== null && greedy.includes(input.eot)) greedy = greedy.slice(0, greedy.indexOf(input.eot));
console.log(
  JSON.stringify({
    text_ids: tokenizer.encode(input.text, { add_special_tokens: false }),
    logits: Array.from(logits.data),
    shape: logits.dims,
    greedy,
  }),
);
