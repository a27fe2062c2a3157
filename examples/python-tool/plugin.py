from chitin_sdk import plugin, tool

plugin("wordcount", description="Counts the lines, words and characters of workspace files", workspace="read")


@tool(read_only=True, concurrency_safe=True)
def count_words(path: str, top: int = 3) -> dict:
    """Count the lines, words and characters of a text file, and its most common words.

    Args:
        path: The file, relative to the workspace.
        top: How many of the most common words to list.
    """
    with open(path, encoding="utf-8") as f:  # the workspace is the plugin's filesystem
        text = f.read()
    words = text.lower().split()
    common = sorted(set(words), key=lambda w: (-words.count(w), w))[:top]
    return {"lines": len(text.splitlines()), "words": len(words), "chars": len(text), "common": common}
