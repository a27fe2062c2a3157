//! Per-call resource limits (config `[limits]`), and the store-side limiter
//! that enforces the memory cap and remembers that it did.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Limits applied to every tool call. Each default guards a named risk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock budget of one call, guest compute and host I/O together:
    /// an infinite loop or a hung request must not hold a turn forever.
    pub timeout_ms: u64,
    /// Linear memory a call may grow to, in MiB: a guest must not be able to
    /// take the host's memory.
    pub memory_mb: u64,
    /// Largest result text accepted, in KiB: a result goes into the model's
    /// context, and a runaway one would flood it (and our memory).
    pub max_output_kb: u64,
    /// Core instances, tables and memories one component may create: bounds
    /// the bookkeeping a hostile component can make the host do.
    pub max_instances: u32,
    /// Tables per component (see `max_instances`).
    pub max_tables: u32,
    /// Elements per table.
    pub max_table_elements: u32,
    /// Tool calls running at once across all plugins; each holds one pooled
    /// instance slot. Further calls wait for a slot.
    pub max_concurrent_calls: u32,
    /// Host resources (open files and directories, streams, HTTP requests,
    /// responses, header maps, pollables) one call may hold at once: they
    /// live in host memory and host descriptors, outside `memory_mb`.
    pub max_resources: u32,
    /// Outgoing HTTP requests one call may have in flight at once: each
    /// holds a socket and a task of the host.
    pub max_http_requests: u32,
    /// Bytes one `wasi:http` header map may hold, in KiB (with the host's
    /// in-memory overhead): bounded together with `max_resources`.
    pub max_header_kb: u32,
    /// CPU seconds compiling one component may take (it runs in a child
    /// process that is stopped at this limit).
    pub compile_cpu_secs: u64,
    /// Address space of that child, in MiB.
    pub compile_memory_mb: u64,
    /// Largest component accepted, in MiB.
    pub max_component_mb: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout_ms: 30_000,
            memory_mb: 256,
            max_output_kb: 1024,
            max_instances: 32,
            max_tables: 32,
            max_table_elements: 100_000,
            max_concurrent_calls: 32,
            max_resources: 1_000,
            max_http_requests: 8,
            max_header_kb: 64,
            compile_cpu_secs: 60,
            compile_memory_mb: 2_048,
            max_component_mb: 64,
        }
    }
}

impl Limits {
    /// The call deadline as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// The memory cap in bytes.
    pub fn memory_bytes(&self) -> usize {
        (self.memory_mb as usize).saturating_mul(1 << 20)
    }

    /// The output cap in bytes.
    pub fn max_output_bytes(&self) -> usize {
        (self.max_output_kb as usize).saturating_mul(1 << 10)
    }

    /// The compile child's address-space cap in bytes.
    pub fn compile_memory_bytes(&self) -> u64 {
        self.compile_memory_mb.saturating_mul(1 << 20)
    }

    /// The component size cap in bytes.
    pub fn max_component_bytes(&self) -> usize {
        (self.max_component_mb as usize).saturating_mul(1 << 20)
    }
}

/// Enforces [`Limits`] on one store. Growth beyond the cap fails inside the
/// guest (`memory.grow` returns -1, as on a real machine out of memory) and is
/// recorded, so the host can name the cause when the guest then traps.
pub struct CallLimiter {
    memory_bytes: usize,
    max_instances: usize,
    max_tables: usize,
    max_table_elements: usize,
    /// Set once a growth request was refused.
    pub memory_exhausted: bool,
}

impl CallLimiter {
    /// A limiter for one call.
    pub fn new(limits: &Limits) -> Self {
        CallLimiter {
            memory_bytes: limits.memory_bytes(),
            max_instances: limits.max_instances as usize,
            max_tables: limits.max_tables as usize,
            max_table_elements: limits.max_table_elements as usize,
            memory_exhausted: false,
        }
    }
}

impl wasmtime::ResourceLimiter for CallLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let ok = desired <= self.memory_bytes;
        self.memory_exhausted |= !ok;
        Ok(ok)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= self.max_table_elements)
    }

    fn instances(&self) -> usize {
        self.max_instances
    }

    fn tables(&self) -> usize {
        self.max_tables
    }

    fn memories(&self) -> usize {
        self.max_instances
    }
}
