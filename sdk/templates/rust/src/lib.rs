use chitin_sdk::prelude::*;

#[derive(Deserialize, ToolArgs)]
pub struct GreetArgs {
    /// Who to greet.
    pub name: String,
    /// How many times to say hello (default 1).
    #[serde(default)]
    pub times: Option<u32>,
}

/// Say hello to someone.
#[tool(read_only, concurrency_safe)]
pub fn greet(args: GreetArgs) -> Result<String, ToolError> {
    if args.name.trim().is_empty() {
        return Err(ToolError::invalid_args("`name` is empty: say who to greet"));
    }
    Ok(vec![format!("Hello, {}!", args.name); args.times.unwrap_or(1) as usize].join("\n"))
}

plugin! {
    name: "{{name}}",
    workspace: "none",
    tools: [greet],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greets() {
        let out = __chitin_invoke("greet", r#"{"name":"Ada","times":2}"#, &Context::default());
        assert_eq!(out.unwrap(), "Hello, Ada!\nHello, Ada!");
        let out = __chitin_invoke("greet", r#"{"name":" "}"#, &Context::default());
        assert!(matches!(out, Err(ToolError::InvalidArgs(_))));
    }
}
