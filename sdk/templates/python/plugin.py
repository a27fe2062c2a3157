from chitin_sdk import plugin, tool

plugin("{{name}}", description="Greets people")


@tool(read_only=True, concurrency_safe=True)
def greet(name: str, times: int = 1) -> str:
    """Say hello to someone.

    Args:
        name: Who to greet.
        times: How many times to say hello.
    """
    if not name.strip():
        raise ValueError("`name` is empty: say who to greet")
    return "\n".join([f"Hello, {name}!"] * times)
