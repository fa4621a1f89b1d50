// Payloads encoded on the wire, as a Python engine with a codec sends and expects them
// (docs/wire.md, "Encoded payloads"): node's own crypto, no dependency.
//
//   import { Fernet } from "./codec.js";
//   new Worker({ ..., codec: new Fernet(process.env.RUNLANE_FERNET_KEYS.split(",")) });
//
// Fernet (https://github.com/fernet/spec) is what runlane.codecs.Fernet writes: encrypted with
// the first key, decrypted with whichever key opens it, so keys rotate. Any object with
// encode(Buffer) -> Buffer and decode(Buffer) -> Buffer (throwing when it cannot) is a codec.

import crypto from "node:crypto";

const VERSION = 0x80;
const ENCODED = "$encoded";
const CLEAR_ERROR_KEYS = ["type", "fatal"];

export class InvalidToken extends Error {
  constructor(message = "InvalidToken") {
    super(message);
    this.name = "InvalidToken";
  }
}

function fernetKey(key, index) {
  const raw = Buffer.from(String(key).trim(), "base64url");
  if (raw.length !== 32) throw new Error(`Fernet key #${index + 1} is not 32 url-safe base64 bytes`);
  return { signing: raw.subarray(0, 16), encryption: raw.subarray(16) };
}

function padded(text) {
  return text + "=".repeat((4 - (text.length % 4)) % 4);
}

export class Fernet {
  constructor(keys) {
    if (!Array.isArray(keys) || keys.length === 0) throw new Error("Fernet takes a list of keys, the one to encrypt with first");
    this.keys = keys.map(fernetKey);
  }

  encode(data) {
    const { signing, encryption } = this.keys[0];
    const iv = crypto.randomBytes(16);
    const cipher = crypto.createCipheriv("aes-128-cbc", encryption, iv);
    const stamp = Buffer.alloc(8);
    stamp.writeBigUInt64BE(BigInt(Math.floor(Date.now() / 1000)));
    const body = Buffer.concat([Buffer.from([VERSION]), stamp, iv, cipher.update(data), cipher.final()]);
    const mac = crypto.createHmac("sha256", signing).update(body).digest();
    return Buffer.from(padded(Buffer.concat([body, mac]).toString("base64url")), "ascii");
  }

  decode(token) {
    const raw = Buffer.from(token.toString("ascii"), "base64url");
    if (raw.length < 57 || raw[0] !== VERSION) throw new InvalidToken();
    const body = raw.subarray(0, raw.length - 32);
    const mac = raw.subarray(raw.length - 32);
    for (const { signing, encryption } of this.keys) {
      const expected = crypto.createHmac("sha256", signing).update(body).digest();
      if (!crypto.timingSafeEqual(expected, mac)) continue;
      const decipher = crypto.createDecipheriv("aes-128-cbc", encryption, body.subarray(9, 25));
      try {
        return Buffer.concat([decipher.update(body.subarray(25)), decipher.final()]);
      } catch {
        throw new InvalidToken();
      }
    }
    throw new InvalidToken();
  }
}

export class PayloadCodecError extends Error {
  constructor(subject, what, reason) {
    super(`${subject}: the ${what} does not decode (${reason})`);
    this.name = "PayloadCodecError";
    this.fatal = true; // never retried: a retry would not decode it either
  }
}

const isEncoded = (value) => value !== null && typeof value === "object" && !Array.isArray(value) && ENCODED in value;

// The payload fields of the wire's messages, sealed going out and opened coming in.
export class WireCodec {
  constructor(codec = null) {
    this.codec = codec;
  }

  seal(value) {
    if (value === null || value === undefined || !this.codec || isEncoded(value)) return value ?? null;
    const data = this.codec.encode(Buffer.from(JSON.stringify(value), "utf8"));
    return { [ENCODED]: Buffer.from(data).toString("base64") };
  }

  open(value, subject, what) {
    if (!isEncoded(value)) return value;
    if (!this.codec) throw new PayloadCodecError(subject, what, "it is encoded, and this side has no codec");
    try {
      return JSON.parse(this.codec.decode(Buffer.from(value[ENCODED], "base64")).toString("utf8"));
    } catch (err) {
      throw new PayloadCodecError(subject, what, err?.name ?? String(err));
    }
  }

  sealError(error) {
    if (!error || !this.codec || isEncoded(error)) return error ?? null;
    const clear = {};
    const hidden = {};
    for (const [key, value] of Object.entries(error)) (CLEAR_ERROR_KEYS.includes(key) ? clear : hidden)[key] = value;
    return { ...clear, ...this.seal(hidden) };
  }

  openError(error, subject, what) {
    if (!isEncoded(error)) return error;
    const { [ENCODED]: sealed, ...clear } = error;
    return { ...this.open({ [ENCODED]: sealed }, subject, what), ...clear };
  }

  // A workflow task's or a step task's payloads opened; PayloadCodecError naming the run.
  openTask(task) {
    const subject = `run '${task.run_id}'`;
    const value = (v, what) => this.open(v, subject, what);
    const error = (e, what) => this.openError(e, subject, what);
    if (task.kind !== "workflow") return { ...task, input: value(task.input, `input of step #${task.seq}`) };
    const children = {};
    for (const [id, outcome] of Object.entries(task.children ?? {})) {
      children[id] = { ...outcome, output: value(outcome.output, `output of child ${id}`), error: error(outcome.error, `error of child ${id}`) };
    }
    return {
      ...task,
      input: value(task.input, "input"),
      history: (task.history ?? []).map((r) => record(r, value, error)),
      signals: (task.signals ?? []).map((s) => ({ ...s, payload: value(s.payload, `payload of signal '${s.name}'`) })),
      children,
    };
  }

  // A step result's or a decision's payloads sealed.
  sealResult(message) {
    if (!this.codec) return message;
    const value = (v) => this.seal(v);
    const error = (e) => this.sealError(e);
    if (message.kind !== "decision") return { ...message, output: value(message.output), error: error(message.error) };
    const outcome = { ...message.outcome };
    for (const field of ["output", "input"]) if (field in outcome) outcome[field] = value(outcome[field]);
    if ("error" in outcome) outcome.error = error(outcome.error);
    return {
      ...message,
      checkpoints: message.checkpoints.map((r) => record(r, value, error)),
      commands: message.commands.map((c) => ("input" in c ? { ...c, input: value(c.input) } : c)),
      outcome,
    };
  }
}

// A record's payloads: its output and error, and its input for a step (another kind's input
// is a reference the engine's store looks up: a child's id, an update's id).
function record(r, value, error) {
  const what = `#${r.seq} (${r.kind} '${r.name}')`;
  return {
    ...r,
    input: r.kind === "step" ? value(r.input, `input of ${what}`) : r.input,
    output: value(r.output, `output of ${what}`),
    error: error(r.error, `error of ${what}`),
  };
}
