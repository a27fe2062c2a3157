//! The `chitin` command. Parsing and printing live in `cli`; everything else
//! is the library.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
