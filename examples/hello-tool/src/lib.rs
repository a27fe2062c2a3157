//! `hello`: the example chitin tool plugin.
//!
//! Build it with
//! `cargo build --target wasm32-wasip2 --profile plugin -p hello-tool`,
//! then try it with
//! `chitin tool call greet --args '{"name":"Ada"}' --plugin target/wasm32-wasip2/plugin/hello_tool.wasm`.

use chitin_sdk::prelude::*;

/// The arguments of `greet`.
#[derive(Debug, Deserialize, ToolArgs)]
pub struct GreetArgs {
    /// Who to greet.
    pub name: String,
    /// How many times to say hello (default 1, at most 10).
    #[serde(default)]
    pub times: Option<u32>,
}

/// Say hello to someone, once or a few times.
#[tool(read_only, concurrency_safe)]
pub fn greet(args: GreetArgs, ctx: &Context) -> Result<String, ToolError> {
    let name = args.name.trim();
    if name.is_empty() {
        return Err(ToolError::invalid_args("`name` is empty: say who to greet"));
    }
    let times = args.times.unwrap_or(1);
    if !(1..=10).contains(&times) {
        return Err(ToolError::invalid_args(format!(
            "`times` is {times}: it must be between 1 and 10"
        )));
    }
    ctx.progress(&format!("greeting {name}"));
    ctx.log(LogLevel::Debug, &format!("greeting {name} {times} time(s)"));
    let lines: Vec<String> = (0..times).map(|_| format!("Hello, {name}!")).collect();
    Ok(lines.join("\n"))
}

/// The arguments of `shout`.
#[derive(Debug, Deserialize, ToolArgs)]
pub struct ShoutArgs {
    /// The text to shout.
    pub text: String,
}

/// Repeat a text in upper case.
#[tool]
pub fn shout(args: ShoutArgs) -> Result<String, ToolError> {
    Ok(args.text.to_uppercase())
}

plugin! {
    name: "hello",
    description: "Greets people",
    workspace: "none",
    network: [],
    tools: [greet, shout],
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        Context::new("cli:test", "cli", "test", "call-1")
    }

    #[test]
    fn greets() {
        let args = GreetArgs {
            name: "Ada".into(),
            times: None,
        };
        assert_eq!(greet(args, &ctx()).unwrap(), "Hello, Ada!");
        let args = GreetArgs {
            name: "Ada".into(),
            times: Some(2),
        };
        assert_eq!(greet(args, &ctx()).unwrap(), "Hello, Ada!\nHello, Ada!");
    }

    #[test]
    fn refuses_bad_arguments() {
        let args = GreetArgs {
            name: " ".into(),
            times: None,
        };
        assert!(matches!(
            greet(args, &ctx()),
            Err(ToolError::InvalidArgs(_))
        ));
        let args = GreetArgs {
            name: "Ada".into(),
            times: Some(0),
        };
        assert!(matches!(
            greet(args, &ctx()),
            Err(ToolError::InvalidArgs(_))
        ));
    }

    #[test]
    fn shouts() {
        let args = ShoutArgs {
            text: "hello".into(),
        };
        assert_eq!(shout(args).unwrap(), "HELLO");
    }

    /// The way the host calls it: by name, with JSON arguments.
    #[test]
    fn dispatches_by_name() {
        let out = __chitin_invoke("greet", r#"{"name":"Ada","times":2}"#, &ctx());
        assert_eq!(out.unwrap(), "Hello, Ada!\nHello, Ada!");
        let out = __chitin_invoke("greet", r#"{"times":2}"#, &ctx());
        assert!(matches!(out, Err(ToolError::InvalidArgs(m)) if m.contains("name")));
        let out = __chitin_invoke("wave", "{}", &ctx());
        assert!(matches!(out, Err(ToolError::UnknownTool(m)) if m.contains("greet, shout")));
    }

    #[test]
    fn manifest() {
        let m: chitin_sdk::serde_json::Value =
            chitin_sdk::serde_json::from_str(__CHITIN_MANIFEST).unwrap();
        assert_eq!(m["name"], "hello");
        assert_eq!(m["tools"][0]["name"], "greet");
        assert_eq!(m["tools"][0]["read_only"], true);
        assert_eq!(m["tools"][0]["parameters"]["required"][0], "name");
        assert_eq!(m["tools"][1]["name"], "shout");
        assert_eq!(m["tools"][1]["read_only"], false);
    }
}
