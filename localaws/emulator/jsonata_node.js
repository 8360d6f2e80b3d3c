// JSONata as Step Functions evaluates it: jsonata 2.0.6 (the engine and version AWS's developer guide names,
// "Transforming data with JSONata in Step Functions") plus the functions Step Functions adds ($partition,
// $range, $hash, $random with an optional seed, $uuid, $parse; "JSONata functions provided by Step
// Functions"), with $eval refused and $now()/$millis() read from the emulator's clock.
//
// One process serves one Python process (jsonata_engine.py): one JSON request a line on stdin, one JSON
// answer a line on stdout, in order. Each expression text is compiled once.
//   request:  {"expression": "...", "bindings": {"states": {...}, "name": value, ...}, "millis": 1733400000000}
//   answer:   {"value": ...} | {"undefined": true} | {"unsupported": true} | {"error": {"code": "...", "message": "..."}}
"use strict";

const crypto = require("crypto");
const readline = require("readline");
const jsonata = require("jsonata");

const AWS_JSONATA_VERSION = "2.0.6";
const installed = require("jsonata/package.json").version;
if (installed !== AWS_JSONATA_VERSION) {
  process.stderr.write(`jsonata ${installed} is installed where Step Functions runs ${AWS_JSONATA_VERSION}: run npm ci\n`);
  process.exit(1);
}

const HASH_ALGORITHMS = { "MD5": "md5", "SHA-1": "sha1", "SHA-256": "sha256", "SHA-384": "sha384", "SHA-512": "sha512" };
// States.ArrayRange's limit, which $range keeps.
const MAX_RANGE_ITEMS = 1000;
// The longest string States.Hash hashes: LocalStack's interpreter (moto's copy:
// asl/component/intrinsic/function/statesfunction/hash_calculations/hash_func.py, MAX_INPUT_CHAR_LEN) and
// aws-local-stepfunctions (StatesHash: "cannot hash a string with more than 10,000 characters") both refuse
// longer ones. Assumed: $hash, which replaces States.Hash, keeps the limit (no AWS page gives it).
const MAX_HASH_INPUT_CHARACTERS = 10000;

class StepFunctionsFunctionError extends Error {
  constructor(message) {
    super(message);
    this.code = "States.QueryEvaluationError";
  }
}

function integer(value, what) {
  if (typeof value !== "number" || !Number.isInteger(value)) {
    throw new StepFunctionsFunctionError(`${what} must be an integer, got ${JSON.stringify(value)}`);
  }
  return value;
}

// The semantics are those of the intrinsics these functions replace (States.ArrayPartition,
// States.ArrayRange, States.Hash, States.MathRandom, States.UUID, States.StringToJson).
const stepFunctionsFunctions = {
  // $partition(array, chunkSize): consecutive chunks of chunkSize items; the last may be shorter.
  partition(array, chunkSize) {
    if (!Array.isArray(array)) {
      throw new StepFunctionsFunctionError(`$partition expects an array, got ${JSON.stringify(array)}`);
    }
    const size = integer(chunkSize, "$partition's chunk size");
    if (size < 1) throw new StepFunctionsFunctionError(`$partition's chunk size must be at least 1, got ${size}`);
    const chunks = [];
    for (let i = 0; i < array.length; i += size) chunks.push(array.slice(i, i + size));
    return chunks;
  },
  // $range(start, end, step): start, start+step, ... up to and including end.
  range(start, end, step) {
    const [first, last, increment] = [[start, "start"], [end, "end"], [step, "step"]].map(
      ([value, name]) => integer(value, `$range's ${name}`));
    if (increment === 0) throw new StepFunctionsFunctionError("$range's step must not be 0");
    const count = Math.max(0, Math.floor((last - first) / increment) + 1);
    if (count > MAX_RANGE_ITEMS) {
      throw new StepFunctionsFunctionError(`$range may produce at most ${MAX_RANGE_ITEMS} items, not ${count}`);
    }
    return Array.from({ length: count }, (_, i) => first + i * increment);
  },
  // $hash(value, algorithm): the lower-case hex digest of the string's UTF-8 bytes.
  hash(value, algorithm) {
    if (typeof value !== "string") {
      throw new StepFunctionsFunctionError(`$hash expects a string to hash, got ${JSON.stringify(value)}`);
    }
    if (value.length > MAX_HASH_INPUT_CHARACTERS) {
      throw new StepFunctionsFunctionError(
        `$hash hashes at most ${MAX_HASH_INPUT_CHARACTERS} characters, got ${value.length}`);
    }
    if (!Object.hasOwn(HASH_ALGORITHMS, algorithm)) {
      throw new StepFunctionsFunctionError(
        `$hash's algorithm must be one of ${Object.keys(HASH_ALGORITHMS).join(", ")}, got ${JSON.stringify(algorithm)}`);
    }
    return crypto.createHash(HASH_ALGORITHMS[algorithm]).update(value, "utf8").digest("hex");
  },
  // $random([seed]): a number in [0, 1); the same seed gives the same number. Assumed: which generator
  // AWS seeds is unpublished (mulberry32 here), so only the same-seed-same-number property holds.
  random(seed) {
    if (seed === undefined) return Math.random();
    let state = integer(seed, "$random's seed") >>> 0;
    state = (state + 0x6d2b79f5) >>> 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  },
  // $uuid(): a version 4 UUID.
  uuid() {
    return crypto.randomUUID();
  },
  // $parse(jsonString): the JSON value the string holds.
  parse(text) {
    if (typeof text !== "string") {
      throw new StepFunctionsFunctionError(`$parse expects a string, got ${JSON.stringify(text)}`);
    }
    try {
      return JSON.parse(text);
    } catch (error) {
      throw new StepFunctionsFunctionError(`$parse could not parse ${JSON.stringify(text)}: ${error.message}`);
    }
  },
  // "$eval is not supported" (developer guide: use $parse to deserialize JSON strings).
  eval() {
    throw new StepFunctionsFunctionError("$eval is not supported in Step Functions; use $parse");
  },
};

// jsonata reads $now()/$millis() from `new Date()` taken once per evaluation: that instant is the
// emulator clock's, sent with each request. Dates built from arguments are untouched.
let clockMillis = Date.now();
const RealDate = Date;
class ClockDate extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(clockMillis);
    else super(...args);
  }
  static now() {
    return clockMillis;
  }
}
globalThis.Date = ClockDate;

const compiled = new Map();

function compile(expression) {
  let program = compiled.get(expression);
  if (program === undefined) {
    program = jsonata(expression);
    for (const [name, implementation] of Object.entries(stepFunctionsFunctions)) {
      program.registerFunction(name, implementation);
    }
    compiled.set(expression, program);
  }
  return program;
}

function isFunction(value) {
  return typeof value === "function" || (value !== null && typeof value === "object" &&
    (value._jsonata_function === true || value._jsonata_lambda === true));
}

async function answer(request) {
  try {
    clockMillis = request.millis;
    const value = await compile(request.expression).evaluate(null, request.bindings);
    if (value === undefined) return { undefined: true };
    if (isFunction(value)) return { unsupported: true };
    return { value };
  } catch (error) {
    return { error: { code: String(error.code || error.name || "Error"), message: error.message || String(error) } };
  }
}

const lines = readline.createInterface({ input: process.stdin, terminal: false });
let queue = Promise.resolve();
lines.on("line", (line) => {
  // Answers go out in the order requests came in: one evaluation at a time (the clock is per request).
  queue = queue.then(async () => {
    const reply = await answer(JSON.parse(line));
    process.stdout.write(JSON.stringify(reply) + "\n");
  });
});
