//! The `chitin` command. Parsing and printing live in `cli`; everything else
//! is the library.

mod cli;

fn main() -> std::process::ExitCode {
    // The binary doubles as the compile child (see `plugins::compile`):
    // checked before any argument parsing, logging or runtime start.
    if std::env::args_os().nth(1).is_some_and(|a| a == chitin::plugins::compile::CHILD_ARG) {
        return chitin::plugins::compile::child_main();
    }
    cli::main()
}
