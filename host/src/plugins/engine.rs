//! The one wasmtime `Engine` of the process, and its epoch ticker.
//!
//! Configuration choices and why:
//! - **Pooling allocator**: instance, memory and table slots are reserved up
//!   front, so a fresh instance per call costs microseconds, not an mmap.
//! - **Epoch interruption**: a ticker bumps the epoch every [`TICK`]; each store
//!   checks its wall-clock deadline at every tick (see `sandbox`), yields to
//!   tokio in between, and traps once past it. Fuel would be deterministic but
//!   is not a time budget.
//! - **No GC, threads or component-model-async**: our guests are p2 components;
//!   leaving the features off keeps the build and the attack surface small.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::PluginError;
use super::limits::Limits;

/// Epoch tick: the resolution of call deadlines.
pub const TICK: Duration = Duration::from_millis(10);

/// Wasm stack a call may use before it traps with a stack overflow. Kept
/// below a Rust guest's 1 MiB shadow stack in linear memory, so runaway
/// recursion hits this clean, named limit first rather than running the
/// shadow stack out of its memory (an anonymous out-of-bounds trap).
const MAX_WASM_STACK: usize = 512 << 10;

/// Host stack for each async call; must exceed [`MAX_WASM_STACK`] plus what
/// host functions need.
const ASYNC_STACK: usize = 4 << 20;

/// Bytes of each memory, table and stack slot kept resident between calls.
const KEEP_RESIDENT: usize = 2 << 20;

/// Slots decommitted together (one cross-CPU TLB flush per batch).
const DECOMMIT_BATCH: usize = 16;

/// Core instances in one component: a Rust component has a handful, a
/// componentize-js one a few dozen.
const MAX_CORE_INSTANCES_PER_COMPONENT: u32 = 64;

/// Builds the engine for `limits`. With `compiles` false the engine cannot
/// compile, only load artifacts compiled elsewhere (the compile child's):
/// Cranelift is then never set up in this process, which spares a one-shot
/// run about 3 MB of resident code and a share of its start (measured with
/// `--bench agent -- oneshot`).
pub fn build_engine(limits: &Limits, compiles: bool) -> Result<Engine, PluginError> {
    let slots = limits.max_concurrent_calls.max(1);
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(slots)
        .total_core_instances(slots * MAX_CORE_INSTANCES_PER_COMPONENT)
        .max_core_instances_per_component(MAX_CORE_INSTANCES_PER_COMPONENT)
        .total_memories(slots * 4)
        .max_memories_per_component(4)
        .total_tables(slots * limits.max_tables.max(1))
        .max_tables_per_component(limits.max_tables.max(1))
        .table_elements(limits.max_table_elements as usize)
        .total_stacks(slots)
        .max_memory_size(limits.memory_bytes())
        // Reset a slot's first pages with memset instead of madvise when it
        // is reused: a call then does not pay syscalls and page faults for
        // the memory every small guest touches.
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(KEEP_RESIDENT)
        .async_stack_keep_resident(KEEP_RESIDENT)
        // With pagemap scanning (Linux 6.7+) only pages the call touched are
        // reset, and batched decommits spare a TLB shootdown per call.
        .pagemap_scan(wasmtime::Enabled::Auto)
        .decommit_batch_size(DECOMMIT_BATCH);

    let mut config = code_config();
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config.enable_compiler(compiles);
    Engine::new(&config).map_err(|e| PluginError::Engine(format!("{e:#}")))
}

/// The settings compiled code depends on, shared by the host's engine and
/// the compile child's ([`compile_engine`]), so an artifact made by one loads
/// in the other.
fn code_config() -> Config {
    let mut config = Config::new();
    config
        .epoch_interruption(true)
        .max_wasm_stack(MAX_WASM_STACK)
        .async_stack_size(ASYNC_STACK)
        .wasm_component_model(true);
    config
}

/// An engine that only compiles: the code settings of [`build_engine`]
/// without the pooling allocator, whose up-front address-space reservation
/// would not fit under the compile child's memory limit.
pub fn compile_engine() -> Result<Engine, PluginError> {
    Engine::new(&code_config()).map_err(|e| PluginError::Engine(format!("{e:#}")))
}

/// Bumps the engine's epoch every [`TICK`] until dropped.
pub struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    /// Starts the ticker thread.
    pub fn start(engine: &Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let engine = engine.weak();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("chitin-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    // park, not sleep: `drop` unparks, so shutdown does not
                    // wait out a tick.
                    std::thread::park_timeout(TICK);
                    match engine.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .expect("spawning the epoch ticker thread");
        EpochTicker { stop, thread: Some(thread) }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}
