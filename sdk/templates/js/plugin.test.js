// Run with: node --test   (natively; no WebAssembly needed)
import { test } from "node:test";
import assert from "node:assert/strict";
import { invoke, manifest } from "./chitin-sdk.js";
import "./plugin.js";

test("greets", async () => {
  assert.equal(await invoke("greet", '{"name":"Ada","times":2}'), "Hello, Ada!\nHello, Ada!");
});

test("an empty name is refused", async () => {
  await assert.rejects(invoke("greet", '{"name":" "}'), { kind: "invalid-args" });
});

test("manifest", () => {
  assert.deepEqual(manifest().tools[0].parameters.required, ["name"]);
});
