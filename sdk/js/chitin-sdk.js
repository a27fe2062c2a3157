// Write chitin tool plugins in JavaScript.
//
// A plugin is a module (`plugin.js`) that names itself and registers one
// function per tool, with a small schema for its parameters:
//
//   import { plugin, tool } from "./chitin-sdk.js";
//
//   plugin({ name: "greeter", description: "Greets people" });
//
//   tool({
//     name: "greet",
//     description: "Say hello to someone.",
//     readOnly: true,
//     params: { name: { type: "string", description: "Who to greet." } },
//   }, ({ name }) => `Hello, ${name}!`);
//
// `chitin plugin build` runs the module natively (node) to write the JSON
// Schemas and the manifest, then builds the component with componentize-js.
// This file is the whole SDK; `chitin plugin new` and `chitin plugin build`
// copy it next to the plugin. See sdk/js/README.md.

const tools = new Map();
let meta = null;
let host = null;

/** A tool error the model reads: `throw new ToolError("no such city", "invalid-args")`. */
export class ToolError extends Error {
  constructor(message, kind = "failed") {
    super(message);
    this.name = "ToolError";
    this.kind = kind;
  }
}

/** `throw failed("...")`, `throw invalidArgs("...")`, `throw denied("...")`. */
export const failed = (message) => new ToolError(message, "failed");
export const invalidArgs = (message) => new ToolError(message, "invalid-args");
export const denied = (message) => new ToolError(message, "denied");

/**
 * Names the plugin and asks for capabilities (the user's config grants them).
 * `network` lists hosts reachable with `fetch`. JavaScript plugins have no
 * file API, so `workspace` is for completeness.
 */
export function plugin({ name, description = "", version = "0.1.0", workspace = "none", network = [] }) {
  meta = { name, description, version, workspace, network: [...network] };
}

/**
 * Registers a tool. `params` maps each parameter to a type name
 * (`"string"`, `"integer"`, `"number"`, `"boolean"`, `"array"`,
 * `"object"`) or a JSON Schema (`{ type, description, enum, items, ... }`);
 * a parameter is required unless it has `optional: true` or a `default`.
 * `run(args, ctx)` returns a string (or a value sent as JSON), or a promise of one.
 */
export function tool({ name, description = "", readOnly = false, concurrencySafe = false, params = {} }, run) {
  if (typeof run !== "function") throw new TypeError(`tool ${name}: the second argument must be the function`);
  if (tools.has(name)) throw new TypeError(`two tools are named ${name}`);
  tools.set(name, { description, readOnly, concurrencySafe, parameters: schema(name, params), run });
}

function schema(tool, params) {
  const properties = {};
  const required = [];
  for (const [key, spec] of Object.entries(params)) {
    const prop = typeof spec === "string" ? { type: spec } : { ...spec };
    if (typeof prop !== "object" || prop === null) throw new TypeError(`tool ${tool}, parameter ${key}: give a type name or a JSON Schema`);
    const optional = prop.optional === true || "default" in prop;
    delete prop.optional;
    if (!optional) required.push(key);
    properties[key] = prop;
  }
  return required.length ? { type: "object", properties, required } : { type: "object", properties };
}

/** The manifest `chitin plugin build` embeds. */
export function manifest() {
  if (!meta) throw new Error('no plugin({...}) call: add plugin({ name: "my-name", description: "..." }) to plugin.js');
  if (tools.size === 0) throw new Error("no tool(...) registered");
  return {
    manifest_version: 1,
    name: meta.name,
    version: meta.version,
    description: meta.description,
    tools: [...tools].map(([name, t]) => ({
      name,
      description: t.description,
      parameters: t.parameters,
      read_only: t.readOnly,
      concurrency_safe: t.concurrencySafe,
    })),
    capabilities: { workspace: meta.workspace, network: meta.network, host: [] },
  };
}

function context(ctx) {
  return {
    sessionKey: ctx?.sessionKey ?? "cli:test",
    channel: ctx?.channel ?? "cli",
    chatId: ctx?.chatId ?? "test",
    callId: ctx?.callId ?? "call-1",
    /** A short status for the user while the call runs (never sent to the model). */
    progress: (text) => (host ? host.progress(String(text)) : console.error(`[progress] ${text}`)),
    /** A line in the host's log; level: trace, debug, info, warn, error. */
    log: (message, level = "info") => (host ? host.log(level, String(message)) : console.error(`[${level}] ${message}`)),
  };
}

function asToolError(e) {
  // Describing a thrown value can throw too (a getter, an object without
  // toString); the tool error must come out whatever was thrown.
  try {
    if (e instanceof ToolError) return new ToolError(String(e.message), e.kind);
    return new ToolError(e instanceof Error ? `${e.name}: ${e.message}` : `thrown: ${String(e)}`, "failed");
  } catch {
    return new ToolError("the tool threw a value that cannot be shown", "failed");
  }
}

/**
 * Runs a tool as the host does: by name, with JSON arguments. Resolves to
 * the result text; rejects with a ToolError (any other exception becomes a
 * `failed` one with its name and message).
 */
export async function invoke(name, argsJson, ctx) {
  const t = tools.get(name);
  if (!t) throw new ToolError(`no tool ${name}; this plugin has: ${[...tools.keys()].join(", ")}`, "unknown-tool");
  let args;
  try {
    args = JSON.parse(argsJson);
  } catch (e) {
    throw new ToolError(`the arguments are not JSON: ${e.message}`, "invalid-args");
  }
  try {
    const result = await t.run(args, context(ctx));
    // JSON.stringify gives undefined for undefined and functions: the WIT
    // result must be a string whatever the tool returned.
    return typeof result === "string" ? result : (JSON.stringify(result) ?? "");
  } catch (e) {
    throw asToolError(e);
  }
}

/** The `chitin:plugin/tool` export; the build's entry module passes the host imports. */
export function __export(hostImports) {
  host = hostImports;
  return {
    async invoke(name, argsJson, ctx) {
      try {
        return await invoke(name, argsJson, ctx);
      } catch (e) {
        const err = asToolError(e);
        // The WIT `tool-error` variant as componentize-js expects it.
        throw { tag: err.kind, val: err.message };
      }
    },
  };
}
