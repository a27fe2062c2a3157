//! The gateway server's connection caps: how many connections may be open
//! at once, in total and per remote address, so clients that open
//! connections and then stall (slowloris) cannot take every slot or every
//! descriptor of the process.
//!
//! The timeouts are hyper's and tokio's, not ours: hyper's
//! `header_read_timeout` (with hyper-util's `TokioTimer`) bounds a request
//! head and, since hyper starts that timer as soon as a keep-alive
//! connection goes idle, the idle wait too; `tokio::time::timeout` bounds a
//! whole request body ([`super::http::read_body_within`]).
//!
//! **Over a cap, a connection is closed at once** (after a best-effort
//! 503 written without waiting), not kept waiting for a slot: a connection
//! that waits holds a descriptor as surely as one that is served, so
//! waiting would let a flood exhaust descriptors anyway, and a client told
//! "no" at once can retry. A stalled connection frees its slot when the
//! header or body timeout closes it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Descriptors kept for everything else the gateway opens (sessions,
/// plugins, the model's and the channels' connections) when the
/// connection cap is derived from the open-file limit.
pub const RESERVED_DESCRIPTORS: u64 = 64;

/// The smallest connection cap the open-file limit can lower to.
pub const MIN_CONNECTIONS: usize = 4;

/// How often a refusal is logged at most (with the count since the last).
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// The total cap the process can hold: `configured`, lowered to the
/// open-file soft limit minus [`RESERVED_DESCRIPTORS`] (at least
/// [`MIN_CONNECTIONS`]). Returns the cap and the limit when it lowered it.
pub fn descriptor_bounded(configured: usize) -> (usize, Option<u64>) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit(2) writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return (configured, None);
    }
    let soft = limit.rlim_cur;
    let room = usize::try_from(soft.saturating_sub(RESERVED_DESCRIPTORS)).unwrap_or(usize::MAX).max(MIN_CONNECTIONS);
    if room < configured { (room, Some(soft)) } else { (configured, None) }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The total cap is reached.
    Total(usize),
    /// Its remote address holds its cap already.
    PerAddress(usize),
}

impl Refusal {
    /// The answer written (best effort) before the connection is closed.
    pub fn response(self) -> Vec<u8> {
        let message = match self {
            Refusal::Total(cap) => format!("the gateway has {cap} connections open, its limit ([gateway] max_connections or the open-file limit); retry shortly"),
            Refusal::PerAddress(cap) => format!("your address has {cap} connections open, the limit per address ([gateway] max_connections_per_address); close some or retry shortly"),
        };
        let body = serde_json::json!({"error": {"message": message, "type": "server_error", "param": null, "code": "too_many_connections"}}).to_string();
        format!("HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }
}

#[derive(Default)]
struct Open {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
    refused: u64,
    last_log: Option<Instant>,
}

/// The open connections, by remote address; shared with every [`Slot`].
pub struct ConnectionSlots {
    total: usize,
    per_address: usize,
    open: Mutex<Open>,
}

/// One open connection's place; dropping it frees the place.
pub struct Slot {
    slots: Arc<ConnectionSlots>,
    address: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().expect("connection slots");
        open.total -= 1;
        if let Some(count) = open.by_address.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                open.by_address.remove(&self.address);
            }
        }
    }
}

impl ConnectionSlots {
    /// Caps of `total` connections and `per_address` from one address.
    pub fn new(total: usize, per_address: usize) -> Arc<Self> {
        Arc::new(ConnectionSlots { total, per_address: per_address.min(total), open: Mutex::default() })
    }

    /// A place for a connection from `address`, or why there is none.
    /// Refusals are logged at most every [`REFUSAL_LOG_EVERY`], with their
    /// count, so a flood cannot flood the log too.
    pub fn acquire(self: &Arc<Self>, address: IpAddr) -> Result<Slot, Refusal> {
        let mut open = self.open.lock().expect("connection slots");
        let from_address = open.by_address.get(&address).copied().unwrap_or(0);
        let refusal = if open.total >= self.total {
            Some(Refusal::Total(self.total))
        } else if from_address >= self.per_address {
            Some(Refusal::PerAddress(self.per_address))
        } else {
            None
        };
        if let Some(refusal) = refusal {
            open.refused += 1;
            let due = open.last_log.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_EVERY);
            if due {
                let refused = std::mem::take(&mut open.refused);
                open.last_log = Some(Instant::now());
                tracing::warn!(%address, "gateway: refused {refused} connection(s) over a cap since the last report ({refusal:?}, {} open)", open.total);
            }
            return Err(refusal);
        }
        open.total += 1;
        *open.by_address.entry(address).or_default() += 1;
        Ok(Slot { slots: self.clone(), address })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().expect("connection slots").total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_hold_per_address_and_in_total_and_free_on_drop() {
        let slots = ConnectionSlots::new(3, 2);
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap());
        let a1 = slots.acquire(a).unwrap();
        let _a2 = slots.acquire(a).unwrap();
        assert_eq!(slots.acquire(a).err(), Some(Refusal::PerAddress(2)));
        let _b1 = slots.acquire(b).unwrap();
        assert_eq!(slots.acquire(b).err(), Some(Refusal::Total(3)));
        assert_eq!(slots.open(), 3);
        drop(a1);
        assert_eq!(slots.open(), 2);
        let _b2 = slots.acquire(b).expect("a freed slot is reused");
        let answer = String::from_utf8(Refusal::PerAddress(2).response()).unwrap();
        assert!(answer.starts_with("HTTP/1.1 503 ") && answer.contains("max_connections_per_address"), "{answer}");
    }

    #[test]
    fn the_open_file_limit_lowers_the_cap() {
        let (cap, lowered) = descriptor_bounded(usize::MAX / 2);
        assert!(lowered.is_some(), "a finite soft limit lowers a huge cap");
        assert!(cap >= MIN_CONNECTIONS && (cap as u64) < lowered.unwrap());
        assert_eq!(descriptor_bounded(1), (1, None));
    }
}
