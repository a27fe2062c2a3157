import { plugin, tool, invalidArgs } from "./chitin-sdk.js";

plugin({ name: "slug", description: "Turns titles into URL slugs" });

tool({
  name: "slugify",
  description: "Turn a title into a URL slug: lower case, ASCII letters and digits, words joined by a separator.",
  readOnly: true,
  concurrencySafe: true,
  params: {
    title: { type: "string", description: "The title to turn into a slug." },
    separator: { type: "string", enum: ["-", "_"], default: "-", description: "What joins the words." },
  },
}, ({ title, separator = "-" }) => {
  const words = title.toLowerCase().match(/[a-z0-9]+/g);
  if (!words) throw invalidArgs("the title has no letters or digits to make a slug of");
  return words.join(separator);
});
