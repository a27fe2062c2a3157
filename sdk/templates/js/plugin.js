import { plugin, tool, invalidArgs } from "./chitin-sdk.js";

plugin({ name: "{{name}}", description: "Greets people" });

tool({
  name: "greet",
  description: "Say hello to someone.",
  readOnly: true,
  concurrencySafe: true,
  params: {
    name: { type: "string", description: "Who to greet." },
    times: { type: "integer", description: "How many times to say hello.", default: 1 },
  },
}, ({ name, times = 1 }) => {
  if (!name.trim()) throw invalidArgs("`name` is empty: say who to greet");
  return Array(times).fill(`Hello, ${name}!`).join("\n");
});
