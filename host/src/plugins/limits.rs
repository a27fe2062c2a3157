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
