//! The driver of the `chitin` binary for its tests (`host/tests/e2e`): a
//! command over a fresh data dir with no provider in the environment,
//! running it to completion (or failing the test if it hangs), and a
//! running gateway. The binary's path is the test crate's
//! `CARGO_BIN_EXE_chitin`, which only that crate knows, so it is passed in.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `BIN ARGS` (`BIN` the `chitin` binary) with `CHITIN_HOME=home` and none
/// of the provider variables of the environment the tests run in.
pub fn command(bin: &str, home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(args).env("CHITIN_HOME", home).env_remove("OPENAI_API_KEY").env_remove("OPENAI_BASE_URL").env_remove("CHITIN_MODEL");
    cmd
}

/// Runs `cmd` to completion (`Command::output`: stdin closed, output kept).
pub fn run(mut cmd: impl std::borrow::BorrowMut<Command>) -> Output {
    cmd.borrow_mut().output().expect("chitin runs")
}

/// Runs `cmd` to completion, but fails the test (and kills the process) if
/// it is still running after `limit`: some attacks are about hangs.
pub fn run_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child: Child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("chitin runs");
    // Read both pipes while waiting, so a chatty child never blocks on a full pipe.
    let mut out_pipe = child.stdout.take().expect("piped");
    let mut err_pipe = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut out_pipe, &mut buf).map(|_| buf).unwrap_or_default()
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut err_pipe, &mut buf).map(|_| buf).unwrap_or_default()
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned();
            panic!("chitin did not exit within {limit:?}; stderr: {stderr}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output { status, stdout: out.join().unwrap_or_default(), stderr: err.join().unwrap_or_default() }
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A running `chitin gateway`: its stderr collected as it comes, the address
/// it printed, killed if the test ends without stopping it.
pub struct Gateway {
    pub child: std::process::Child,
    /// `http://host:port`, from the "listening on" line.
    pub base: String,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Gateway {
    /// Starts `cmd` (a `chitin gateway …`) and waits until it says where it
    /// listens; panics with its stderr if it never does.
    pub fn spawn(mut cmd: Command) -> Gateway {
        use std::io::BufRead;
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("chitin gateway starts");
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let pipe = child.stderr.take().expect("piped");
        let log = stderr.clone();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                // Stored before it is signalled, so `stderr()` has it then.
                let base = line.split("listening on ").nth(1).map(|rest| rest.split_whitespace().next().unwrap_or_default().to_string());
                log.lock().unwrap().push_str(&(line + "\n"));
                if let Some(base) = base {
                    let _ = tx.send(base);
                }
            }
        });
        let base = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(base) => base,
            Err(_) => panic!("the gateway did not say where it listens; stderr: {}", stderr.lock().unwrap()),
        };
        Gateway { child, base, stderr, reader: Some(reader) }
    }

    /// The address it listens on.
    pub fn base(&self) -> String {
        self.base.clone()
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Everything it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits (bounded by a generous limit, not a timing assertion) until
    /// `cond` holds; panics with the stderr otherwise.
    pub fn wait_for(&self, what: &str, cond: impl Fn() -> bool) {
        for _ in 0..6000 {
            if cond() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("never saw {what}; stderr: {}", self.stderr());
    }

    /// Sends SIGTERM.
    pub fn signal_term(&self) {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) }, 0);
    }

    /// Its exit status, waiting at most 30 s (then it is killed and the test fails).
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        for _ in 0..3000 {
            if let Some(status) = self.child.try_wait().unwrap() {
                // The pipe closes at exit: wait (bounded) until the reader
                // has stored the last lines, so `stderr()` has them all.
                if let Some(reader) = self.reader.take() {
                    for _ in 0..500 {
                        if reader.is_finished() {
                            let _ = reader.join();
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                return status;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        panic!("the gateway did not exit; stderr: {}", self.stderr());
    }

    /// SIGTERM, then its exit status.
    pub fn sigterm(&mut self) -> std::process::ExitStatus {
        self.signal_term();
        self.wait_exit()
    }

    /// SIGTERM; asserts a clean exit and returns the whole stderr.
    pub fn terminate(mut self) -> String {
        let status = self.sigterm();
        // The reader thread may still be appending the last lines.
        std::thread::sleep(Duration::from_millis(50));
        assert!(status.success(), "gateway exit {status}; stderr: {}", self.stderr());
        self.stderr()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
