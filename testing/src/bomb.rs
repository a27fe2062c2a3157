//! A compile bomb: a small component that keeps Cranelift busy for minutes,
//! for the tests of `plugins::compile` (the caps and the compile child).
//! Compiled into the library like the rest of `testing`, so the binary's
//! tests (`host/tests`) and the integration tests share one generator.

/// `(locals, depth)` of a small [`compile_bomb`]: 11 KiB, compiles in ~30 ms
/// (`Component::new`, 20 MB peak RSS; same with `Engine::default()` and
/// with chitin's engine config). Measured on the 2-core dev machine,
/// wasmtime 48.0.8, release build. For reference: (1000, 20) 23 KiB takes
/// ~0.33 s, (2000, 20) 45 KiB ~1.2 s (both configs), (2000, 100) 46 KiB
/// ~30 s / 260 MB (chitin's config); the time grows about with the square
/// of `locals × depth`.
pub const BOMB_SMALL: (u32, u32) = (500, 10);

/// `(locals, depth)` of a [`compile_bomb`] that keeps Cranelift busy far
/// past any tool deadline: 91 KiB; `Component::new` with chitin's engine
/// config was still compiling after 60 s at ~500 MB RSS (killed), and
/// `chitin tool call boom --plugin` on the unhardened host was still
/// compiling after 65 s (killed) at 505 MiB, `timeout_ms` not applying.
/// Extrapolated from (2000, 100): ~2 minutes.
pub const BOMB_HUGE: (u32, u32) = (4000, 100);

/// A component whose one core function has `locals` i64 locals, all live
/// across a loop around `depth` nested blocks that each merge two versions
/// of every local, so register allocation works on `locals × depth` SSA
/// block parameters (its time grows about with their square). It carries
/// a valid top-level `chitin:manifest` (plugin `bomb`, tool `boom`) and an
/// export named `chitin:plugin/tool@0.1.0` (an empty instance) so the host
/// reads it as a tool plugin at load; the instance has no `invoke`, so it
/// fails at link time, *after* the host has compiled it. Nothing in it ever
/// runs.
pub fn compile_bomb(locals: u32, depth: u32) -> Vec<u8> {
    use wasm_encoder::{
        BlockType, CodeSection, Component, ComponentExportKind, ComponentExportSection, ComponentInstanceSection, CustomSection,
        ExportKind, ExportSection, Function, FunctionSection, Instruction as I, Module, ModuleSection, TypeSection, ValType,
    };

    let n = locals.max(1);
    let mut types = TypeSection::new();
    types.ty().function([], [ValType::I64]);
    let mut functions = FunctionSection::new();
    functions.function(0);
    let mut exports = ExportSection::new();
    exports.export("boom", ExportKind::Func, 0);

    let mut body = Function::new([(n, ValType::I64)]);
    // Distinct starting values, so no two locals are the same value.
    for i in 0..n {
        body.instruction(&I::I64Const(i64::from(i)));
        body.instruction(&I::LocalSet(i));
    }
    // One loop around `depth` nested blocks. Each block starts with a
    // forward `br_if` to its end, skipping the update in the innermost
    // block, so the end of every block merges two versions of every local:
    // `locals × depth` SSA block parameters from O(locals + depth) bytes.
    // Blocks rather than nested loops: wasmtime's epoch interruption puts a
    // check with a call on each loop header, which splits the live ranges
    // and made nested loops ~12× cheaper to compile under chitin's engine.
    body.instruction(&I::Loop(BlockType::Empty));
    for level in 0..depth {
        body.instruction(&I::Block(BlockType::Empty));
        branch_if_small(&mut body, level % n, 0);
    }
    // Innermost: every local is read and written, each new value depending
    // on two old ones, so nothing folds away.
    for i in 0..n {
        body.instruction(&I::LocalGet(i));
        body.instruction(&I::LocalGet((i + 1) % n));
        body.instruction(&I::I64Add);
        body.instruction(&I::I64Const(1));
        body.instruction(&I::I64Add);
        body.instruction(&I::LocalSet((i + 1) % n));
    }
    for _ in 0..depth {
        body.instruction(&I::End);
    }
    // The back edge: every local is live around the whole loop.
    branch_if_small(&mut body, 0, 0);
    body.instruction(&I::End);
    // Use every local after the loop.
    body.instruction(&I::LocalGet(0));
    for i in 1..n {
        body.instruction(&I::LocalGet(i));
        body.instruction(&I::I64Xor);
    }
    body.instruction(&I::End);
    let mut code = CodeSection::new();
    code.function(&body);

    let mut module = Module::new();
    module.section(&types).section(&functions).section(&exports).section(&code);

    let manifest = serde_json::json!({
        "manifest_version": 1,
        "name": "bomb",
        "version": "0.1.0",
        "description": format!("A compile bomb: {locals} locals live across {depth} nested blocks in a loop"),
        "tools": [{
            "name": "boom",
            "description": "Never runs: compiling the plugin is the attack",
            "parameters": {"type": "object", "properties": {}},
        }],
        "capabilities": {},
    });
    let manifest = serde_json::to_vec(&manifest).expect("manifest JSON");

    let mut component = Component::new();
    component.section(&ModuleSection(&module));
    let mut instances = ComponentInstanceSection::new();
    instances.export_items(std::iter::empty::<(&str, ComponentExportKind, u32)>());
    component.section(&instances);
    let mut component_exports = ComponentExportSection::new();
    component_exports.export(chitin::plugins::world::TOOL_V0_1, ComponentExportKind::Instance, 0, None);
    component.section(&component_exports);
    component.section(&CustomSection { name: chitin::plugins::manifest::SECTION_NAME.into(), data: manifest.into() });
    component.finish()
}

/// `br_if label` when local `local` is below 2^40 (data-dependent, so the
/// branch cannot be folded).
fn branch_if_small(body: &mut wasm_encoder::Function, local: u32, label: u32) {
    use wasm_encoder::Instruction as I;
    body.instruction(&I::LocalGet(local));
    body.instruction(&I::I64Const(1 << 40));
    body.instruction(&I::I64LtU);
    body.instruction(&I::BrIf(label));
}

