//! Compiling a component: the one step where plugin bytes drive the host's
//! CPU and memory before any per-call limit applies.
//!
//! Cranelift's time and memory grow faster than linearly with some shapes of
//! code (a 67 KiB component with one function whose many locals stay live
//! across deeply nested loops kept it busy for minutes at 1.6 GiB), and a
//! compile cannot be interrupted. So:
//! 1. **Caps before compiling** ([`check_component`]): the component's size
//!    and, per function, its locals and body size, read with wasmparser in
//!    one pass. Past a cap the plugin is refused with a message naming it.
//! 2. **A child process** ([`Isolation::Child`]): the `chitin` binary runs
//!    itself as `chitin __compile` with `RLIMIT_CPU` and `RLIMIT_AS` set, reads
//!    the component on stdin and writes the serialized artifact on stdout. A
//!    bomb that passes the caps dies in the child at its limit; the host only
//!    sees an error. The artifact is then cached (see [`super::cache`]), so
//!    this happens once per component, at install or first load, never on a
//!    tool call's deadline.
//!
//! In-process compilation ([`Isolation::InProcess`]) remains for tests and
//! benchmarks whose components are trusted fixtures.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use wasmparser::{Parser, Payload};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::PluginError;
use super::engine::compile_engine;
use super::limits::Limits;

/// The first argument that makes the `chitin` binary a compile child.
pub const CHILD_ARG: &str = "__compile";

/// Locals one function may declare. Real interpreters (CPython,
/// SpiderMonkey) stay far below; the compile bombs need thousands.
pub const MAX_FUNCTION_LOCALS: u32 = 5_000;

/// Bytes of one function body.
pub const MAX_FUNCTION_BYTES: usize = 4 << 20;

/// Where compilation runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Isolation {
    /// In this process, without CPU or memory limits: trusted components only.
    #[default]
    InProcess,
    /// In a child process: this program (the `chitin` binary), run with
    /// [`CHILD_ARG`].
    Child(PathBuf),
}

/// Refuses a component past the size and per-function caps, without
/// compiling it.
pub fn check_component(name: &str, bytes: &[u8], limits: &Limits) -> Result<(), PluginError> {
    let refuse = |message: String| PluginError::TooComplex { plugin: name.to_string(), message };
    if bytes.len() > limits.max_component_bytes() {
        return Err(refuse(format!(
            "it is {} bytes, over the {} MiB limit (config [limits] max_component_mb)",
            bytes.len(),
            limits.max_component_mb
        )));
    }
    let mut function = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let Ok(Payload::CodeSectionEntry(body)) = payload else { continue };
        function += 1;
        let size = body.range().len();
        if size > MAX_FUNCTION_BYTES {
            return Err(refuse(format!("function {function} has a {size}-byte body (at most {MAX_FUNCTION_BYTES})")));
        }
        let mut locals = 0u32;
        // A malformed body is left to the compiler to reject with its own
        // message; the caps only concern well-formed ones.
        if let Ok(reader) = body.get_locals_reader() {
            for entry in reader {
                let Ok((count, _)) = entry else { break };
                locals = locals.saturating_add(count);
            }
        }
        if locals > MAX_FUNCTION_LOCALS {
            return Err(refuse(format!("function {function} declares {locals} locals (at most {MAX_FUNCTION_LOCALS})")));
        }
    }
    Ok(())
}

/// Compiles `bytes` and returns the loaded component with its serialized
/// form (for the cache).
pub async fn compile(
    engine: &Engine,
    isolation: &Isolation,
    limits: &Limits,
    name: &str,
    bytes: &super::runtime::ComponentBytes,
) -> Result<(Component, Vec<u8>), PluginError> {
    check_component(name, bytes, limits)?;
    let failed = |message: String| PluginError::Compile { plugin: name.to_string(), message };
    match isolation {
        Isolation::InProcess => {
            let (engine, bytes) = (engine.clone(), bytes.clone());
            tokio::task::spawn_blocking(move || {
                let component = Component::new(&engine, &*bytes).map_err(|e| format!("{e:#}"))?;
                let artifact = component.serialize().map_err(|e| format!("{e:#}"))?;
                Ok::<_, String>((component, artifact))
            })
            .await
            .map_err(|e| failed(format!("the compile task failed: {e}")))?
            .map_err(failed)
        }
        Isolation::Child(program) => {
            let artifact = compile_in_child(program, limits, name, bytes).await?;
            // SAFETY: the artifact is `Component::serialize` output of our own
            // binary, received over a pipe from the child we started, for an
            // engine with the same code settings (`engine::code_config`).
            let component = unsafe { Component::deserialize(engine, &artifact) }
                .map_err(|e| failed(format!("the compiled artifact does not load: {e:#}")))?;
            Ok((component, artifact))
        }
    }
}

async fn compile_in_child(program: &std::path::Path, limits: &Limits, name: &str, bytes: &super::runtime::ComponentBytes) -> Result<Vec<u8>, PluginError> {
    let (program, limits, input) = (program.to_path_buf(), limits.clone(), bytes.clone());
    let run = tokio::task::spawn_blocking(move || run_child(&program, &limits, &input));
    let failed = |message: String| PluginError::Compile { plugin: name.to_string(), message };
    run.await.map_err(|e| failed(format!("the compile task failed: {e}")))?.map_err(failed)
}

/// Runs the compile child to completion (blocking; called off the runtime).
fn run_child(program: &std::path::Path, limits: &Limits, input: &[u8]) -> Result<Vec<u8>, String> {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let cpu = limits.compile_cpu_secs.max(1);
    let memory = limits.compile_memory_bytes();
    let mut command = std::process::Command::new(program);
    command.arg(CHILD_ARG).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls (setrlimit) between fork and exec.
    unsafe {
        command.pre_exec(move || {
            set_limit(libc::RLIMIT_CPU, cpu, cpu + 1)?;
            set_limit(libc::RLIMIT_AS, memory, memory)?;
            set_limit(libc::RLIMIT_CORE, 0, 0)
        });
    }
    let mut child = command.spawn().map_err(|e| format!("cannot start the compiler process {}: {e}", program.display()))?;
    let mut stdin = child.stdin.take().expect("piped");
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    std::thread::scope(|scope| {
        // A child that dies early closes the pipe; its exit status says why.
        scope.spawn(move || {
            let _ = stdin.write_all(input);
        });
        let out = scope.spawn(move || {
            let mut buf = Vec::new();
            stdout.read_to_end(&mut buf).map(|_| buf)
        });
        let err = scope.spawn(move || {
            let mut buf = Vec::new();
            // Bounded: a chatty compiler must not grow the host.
            (&mut stderr).take(64 << 10).read_to_end(&mut buf).map(|_| buf)
        });
        // Wall clock as a backstop for a child that sleeps rather than computes.
        // Generous, because on a loaded machine the child gets a fraction of a
        // core and the CPU limit is the one meant to stop a compile bomb.
        let wall = Duration::from_secs(cpu.saturating_mul(3) + 20);
        let started = std::time::Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if started.elapsed() > wall => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("compiling took longer than {} s and was stopped (config [limits] compile_cpu_secs)", wall.as_secs()));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(format!("cannot wait for the compiler process: {e}")),
            }
        };
        let artifact = out.join().expect("reader thread").map_err(|e| format!("cannot read the artifact: {e}"))?;
        if status.success() {
            return Ok(artifact);
        }
        let stderr = err.join().expect("reader thread").unwrap_or_default();
        let stderr = crate::text::clip_for_terminal(String::from_utf8_lossy(&stderr).trim(), 2_000, "compiler output");
        Err(match status.signal() {
            Some(libc::SIGXCPU) | Some(libc::SIGKILL) => format!(
                "compiling needed more than {cpu} s of CPU and was stopped (config [limits] compile_cpu_secs); the component is too complex to compile"
            ),
            _ if stderr.contains("memory allocation") || stderr.contains("out of memory") || status.signal() == Some(libc::SIGABRT) => format!(
                "compiling needed more than {} MiB of memory and was stopped (config [limits] compile_memory_mb)",
                limits.compile_memory_mb
            ),
            _ if stderr.is_empty() => format!("the compiler process exited with {status}"),
            _ => stderr,
        })
    })
}

fn set_limit(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) -> std::io::Result<()> {
    let limit = libc::rlimit { rlim_cur: soft as libc::rlim_t, rlim_max: hard as libc::rlim_t };
    // SAFETY: a plain syscall on a valid struct.
    if unsafe { libc::setrlimit(resource, &limit) } == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// The compile child: component bytes on stdin, serialized artifact on
/// stdout, a one-line error on stderr and exit code 1 on failure.
pub fn child_main() -> ExitCode {
    let run = || -> Result<Vec<u8>, String> {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes).map_err(|e| format!("cannot read the component: {e}"))?;
        let engine = compile_engine().map_err(|e| e.to_string())?;
        let component = Component::new(&engine, &bytes).map_err(|e| format!("{e:#}"))?;
        component.serialize().map_err(|e| format!("{e:#}"))
    };
    match run() {
        Ok(artifact) => match std::io::stdout().lock().write_all(&artifact) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cannot write the artifact: {e}");
                ExitCode::FAILURE
            }
        },
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component wrapping one core module whose single function declares
    /// `locals` i64 locals.
    fn with_locals(locals: u32) -> Vec<u8> {
        use wasm_encoder::{CodeSection, Function, FunctionSection, Instruction, Module, ModuleSection, TypeSection, ValType};
        let mut module = Module::new();
        let mut types = TypeSection::new();
        types.ty().function([], []);
        module.section(&types);
        let mut functions = FunctionSection::new();
        functions.function(0);
        module.section(&functions);
        let mut code = CodeSection::new();
        let mut f = Function::new([(locals, ValType::I64)]);
        f.instruction(&Instruction::End);
        code.function(&f);
        module.section(&code);
        let mut component = wasm_encoder::Component::new();
        component.section(&ModuleSection(&module));
        component.finish()
    }

    #[test]
    fn components_past_the_caps_are_refused_before_compiling() {
        let limits = Limits::default();
        check_component("ok", &with_locals(MAX_FUNCTION_LOCALS), &limits).unwrap();
        let err = check_component("bomb", &with_locals(MAX_FUNCTION_LOCALS + 1), &limits).unwrap_err().to_string();
        assert_eq!(err, "plugin bomb is refused: function 1 declares 5001 locals (at most 5000)");
        let small = Limits { max_component_mb: 0, ..Limits::default() };
        let err = check_component("big", &with_locals(1), &small).unwrap_err().to_string();
        assert!(err.contains("over the 0 MiB limit (config [limits] max_component_mb)"), "{err}");
    }

    #[test]
    fn an_artifact_of_the_compile_engine_loads_in_the_pooling_engine() {
        let component = b"\0asm\x0d\0\x01\0";
        let artifact = Component::new(&compile_engine().unwrap(), component).unwrap().serialize().unwrap();
        let host = super::super::engine::build_engine(&Limits::default(), true).unwrap();
        unsafe { Component::deserialize(&host, &artifact) }.expect("same code settings");
        // The host that compiles in a child has no compiler of its own.
        let loader = super::super::engine::build_engine(&Limits::default(), false).unwrap();
        unsafe { Component::deserialize(&loader, &artifact) }.expect("same code settings, no compiler");
    }
}
