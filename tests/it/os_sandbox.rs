//! The OS sandbox (bubblewrap) against hostile native commands: each attack
//! is first shown to work without the sandbox (or the command is shown to
//! have really run), then to be contained inside it.

use std::io::Write as _;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use chitin::sandbox::{SandboxError, SandboxLimits, SandboxPolicy, command};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// `sh -c script` inside the sandbox, with a wall timeout.
async fn sandboxed(policy: &SandboxPolicy, script: &str) -> Run {
    let mut cmd = command("sh", &["-c".into(), script.into()], policy)
        .expect("the sandbox is available (scripts/test installs bubblewrap)");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("the sandboxed command ends")
        .expect("bwrap runs");
    Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The same script without the sandbox (to show the attack works there).
fn unsandboxed(script: &str) -> Run {
    let out = std::process::Command::new("sh")
        .args(["-c", script])
        .output()
        .expect("sh runs");
    Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A data dir (`CHITIN_HOME`) with a config holding a secret, and the
/// default workspace inside it.
struct Layout {
    _root: tempfile::TempDir,
    data: PathBuf,
    workspace: PathBuf,
    config: PathBuf,
    /// A directory beside the data dir, outside everything the sandbox binds.
    outside: PathBuf,
}

fn layout() -> Layout {
    let root = tempfile::tempdir().unwrap();
    let base = root.path().canonicalize().unwrap();
    let data = base.join("chitin-home");
    let workspace = data.join("workspace");
    let outside = base.join("outside");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(data.join("secrets")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let config = data.join("config.toml");
    std::fs::write(&config, "api_key = \"SENTINEL-CONFIG-7731\"\n").unwrap();
    std::fs::write(data.join("secrets/token"), "SENTINEL-SECRET-7731").unwrap();
    std::fs::write(outside.join("victim"), "original").unwrap();
    Layout {
        _root: root,
        data,
        workspace,
        config,
        outside,
    }
}

fn policy(l: &Layout) -> SandboxPolicy {
    SandboxPolicy {
        workspace: l.workspace.clone(),
        hidden_paths: vec![l.data.clone()],
        ..SandboxPolicy::default()
    }
}

#[tokio::test]
async fn the_config_and_the_data_dir_beside_the_workspace_are_invisible() {
    let l = layout();
    let script = format!(
        "cat {}; cat {}/secrets/token; ls -a {}",
        l.config.display(),
        l.data.display(),
        l.data.display()
    );
    let plain = unsandboxed(&script);
    assert!(
        plain.stdout.contains("SENTINEL-CONFIG-7731")
            && plain.stdout.contains("SENTINEL-SECRET-7731"),
        "{}",
        plain.stdout
    );

    let run = sandboxed(&policy(&l), &format!("{script}; echo ran")).await;
    assert!(
        run.stdout.contains("ran"),
        "the command ran: {} {}",
        run.stdout,
        run.stderr
    );
    assert!(!run.stdout.contains("SENTINEL"), "{}", run.stdout);
    // The parent holds the workspace's mount point only.
    assert!(
        !run.stdout.contains("config.toml") && !run.stdout.contains("secrets"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("workspace"), "{}", run.stdout);
    // The same with the data dir not even named as hidden: only what is
    // bound exists.
    let run = sandboxed(
        &SandboxPolicy {
            hidden_paths: vec![],
            ..policy(&l)
        },
        &format!("{script}; echo ran"),
    )
    .await;
    assert!(
        run.stdout.contains("ran") && !run.stdout.contains("SENTINEL"),
        "{}",
        run.stdout
    );
    // A home directory that holds the data dir, bound read-only on purpose,
    // still does not show the data dir.
    let home = l.data.parent().unwrap().to_path_buf();
    let run = sandboxed(
        &SandboxPolicy {
            read_only_paths: vec![home.clone()],
            ..policy(&l)
        },
        &format!("ls {}; {script}", home.display()),
    )
    .await;
    assert!(
        run.stdout.contains("outside"),
        "the home dir is bound: {}",
        run.stdout
    );
    assert!(
        !run.stdout.contains("SENTINEL") && !run.stdout.contains("config.toml"),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn the_host_environment_and_proc_1_environ_are_invisible() {
    // SAFETY: a name no other test reads or writes; set before any
    // sandboxed process of this test starts.
    unsafe { std::env::set_var("CHITIN_TEST_SANDBOX_SENTINEL", "SENTINEL-ENV-4412") };
    let plain =
        unsandboxed("echo $CHITIN_TEST_SANDBOX_SENTINEL; cat /proc/$$/environ | tr '\\0' '\\n'");
    assert!(
        plain.stdout.contains("SENTINEL-ENV-4412"),
        "{}",
        plain.stdout
    );

    let l = layout();
    let mut p = policy(&l);
    p.env.push(("GIVEN".into(), "given-value".into()));
    let run = sandboxed(&p, "env; for f in /proc/[0-9]*/environ; do echo $f; tr '\\0' '\\n' < $f; done; cat /proc/1/cmdline").await;
    assert!(
        run.stdout.contains("/proc/1/environ"),
        "PID 1's environ was read: {}",
        run.stdout
    );
    assert!(!run.stdout.contains("SENTINEL-ENV-4412"), "{}", run.stdout);
    assert!(run.stdout.contains("GIVEN=given-value"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains(&format!("HOME={}", l.workspace.display())),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn writes_outside_the_workspace_are_contained() {
    let l = layout();
    let victim = l.outside.join("victim");
    let attacks = format!(
        "echo pwned > {v}; echo pwned > ../../outside/victim; ln -s {v} link; echo pwned > link; \
         ln {v} hard; echo pwned > hard; ln /etc/passwd hardpw; echo pwned >> /etc/passwd; echo pwned > /usr/pwned; \
         echo inside > inside.txt",
        v = victim.display()
    );
    // Without the sandbox, the first attack alone already succeeds.
    let plain = unsandboxed(&format!("echo pwned > {}", victim.display()));
    assert!(plain.ok);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "pwned\n");
    std::fs::write(&victim, "original").unwrap();
    let passwd = std::fs::read("/etc/passwd").unwrap();

    let run = sandboxed(&policy(&l), &attacks).await;
    assert_eq!(
        std::fs::read_to_string(l.workspace.join("inside.txt")).unwrap(),
        "inside\n",
        "the script ran to its end: {}",
        run.stderr
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original");
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd);
    assert!(!Path::new("/usr/pwned").exists());
    // The symlink exists but points at nothing the sandbox could reach.
    assert!(l.workspace.join("link").symlink_metadata().is_ok());
    assert!(
        !l.workspace.join("hard").exists()
            || std::fs::read_to_string(l.workspace.join("hard")).unwrap() == "pwned\n"
    );
    assert_eq!(
        std::fs::metadata(&victim).unwrap().nlink(),
        1,
        "no hard link to the victim was made"
    );
}

#[tokio::test]
async fn a_read_only_workspace_refuses_writes_and_a_writable_one_takes_them() {
    let l = layout();
    std::fs::write(l.workspace.join("note"), "before").unwrap();
    let run = sandboxed(
        &policy(&l),
        "cat note; echo after > note; mkdir d && echo x > d/f",
    )
    .await;
    assert!(run.ok, "{}", run.stderr);
    assert_eq!(run.stdout, "before");
    assert_eq!(
        std::fs::read_to_string(l.workspace.join("note")).unwrap(),
        "after\n"
    );
    assert!(l.workspace.join("d/f").exists());

    let p = SandboxPolicy {
        workspace_read_only: true,
        ..policy(&l)
    };
    let run = sandboxed(&p, "cat note; echo again > note; touch new").await;
    assert_eq!(run.stdout, "after\n", "the workspace is readable");
    assert!(
        !run.ok && run.stderr.contains("Read-only file system"),
        "{}",
        run.stderr
    );
    assert_eq!(
        std::fs::read_to_string(l.workspace.join("note")).unwrap(),
        "after\n"
    );
    assert!(!l.workspace.join("new").exists());
}

#[tokio::test]
async fn the_working_directory_is_the_workspace_or_a_directory_inside_it() {
    let l = layout();
    std::fs::create_dir(l.workspace.join("sub")).unwrap();
    let run = sandboxed(&policy(&l), "pwd").await;
    assert_eq!(run.stdout.trim(), l.workspace.display().to_string());
    let run = sandboxed(
        &SandboxPolicy {
            cwd: Some("sub".into()),
            ..policy(&l)
        },
        "pwd",
    )
    .await;
    assert_eq!(
        run.stdout.trim(),
        l.workspace.join("sub").display().to_string()
    );
    let err = command(
        "pwd",
        &[],
        &SandboxPolicy {
            cwd: Some(l.outside.clone()),
            ..policy(&l)
        },
    )
    .unwrap_err();
    assert!(
        matches!(err, SandboxError::Policy(ref m) if m.contains("outside the workspace")),
        "{err}"
    );
}

/// Counts connections a listener on 127.0.0.1 accepted.
fn listener() -> (u16, impl Fn() -> usize) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    (port, move || {
        std::iter::from_fn(|| listener.accept().ok()).count()
    })
}

#[tokio::test]
async fn without_network_127_0_0_1_is_unreachable() {
    let (port, accepted) = listener();
    let script = format!("echo hello > /dev/tcp/127.0.0.1/{port} && echo connected");
    let plain = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&plain.stdout).contains("connected"));
    assert_eq!(accepted(), 1, "the attack works unsandboxed");

    let l = layout();
    let mut cmd = command(
        "bash",
        &["-c".into(), format!("{script}; echo tried")],
        &policy(&l),
    )
    .unwrap();
    let out = cmd.output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("tried") && !stdout.contains("connected"),
        "{stdout}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(accepted(), 0, "no connection reached the listener");

    // With `network`, the same command connects (the grant is real).
    let mut cmd = command(
        "bash",
        &["-c".into(), script],
        &SandboxPolicy {
            network: true,
            ..policy(&l)
        },
    )
    .unwrap();
    let out = cmd.output().await.unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("connected"));
    assert_eq!(accepted(), 1);
}

#[tokio::test]
async fn the_sandbox_dies_with_its_parent() {
    let l = layout();
    let cmd = command(
        "sh",
        &[
            "-c".into(),
            "while true; do date +%s%N > alive; sleep 0.1; done".into(),
        ],
        &policy(&l),
    )
    .unwrap();
    let std_cmd = cmd.as_std();
    // A parent of its own that the test can kill: sh starts bwrap in the
    // background and waits.
    let mut parent = std::process::Command::new("sh");
    parent
        .arg("-c")
        .arg("\"$@\" & wait")
        .arg("parent")
        .arg(std_cmd.get_program())
        .args(std_cmd.get_args());
    let mut parent = parent.spawn().unwrap();
    let alive = l.workspace.join("alive");
    let started = Instant::now();
    while !alive.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the sandboxed loop never ran"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    parent.kill().unwrap();
    parent.wait().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let last = std::fs::read_to_string(&alive).unwrap();
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        std::fs::read_to_string(&alive).unwrap(),
        last,
        "the loop stopped with its parent"
    );
}

#[tokio::test]
async fn a_fork_bomb_is_contained() {
    let l = layout();
    let limits = SandboxLimits {
        processes: Some(32),
        ..SandboxLimits::default()
    };
    let p = SandboxPolicy {
        limits,
        ..policy(&l)
    };
    // A bounded bomb (200 sleepers) so that an uncontained one cannot hurt
    // the machine. The inner shell forks until it cannot (dash then exits);
    // the outer one counts the processes alive with builtins only (no fork
    // is left to run `ps`).
    let script =
        "sh -c 'for i in $(seq 1 200); do sleep 31.713 & done'; set -- /proc/[0-9]*; echo alive=$#";
    let run = sandboxed(&p, script).await;
    let alive: usize = run
        .stdout
        .trim()
        .strip_prefix("alive=")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "the bomb ran and was counted: {} {}",
                run.stdout, run.stderr
            )
        });
    assert!(alive > 20, "the bomb really forked: {alive}");
    // RLIMIT_NPROC, counted in the sandbox's user namespace; for a root
    // host (exempt from it) the pids cgroup, where one is writable (this
    // machine's, and CI's, which runs as root).
    let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let cgroup = mounts.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && ((f[2] == "cgroup" && f[3].split(',').any(|o| o == "pids")) || (f[2] == "cgroup2" && std::fs::read_to_string(format!("{}/cgroup.controllers", f[1])).unwrap_or_default().contains("pids")))
    });
    if !root || cgroup {
        assert!(alive <= 33, "no more processes than the cap: {alive}");
        assert!(
            run.stderr.contains("fork"),
            "forks past the cap failed: {}",
            run.stderr
        );
    }
    // Root is exempt from RLIMIT_NPROC (the kernel's rule): then the PID
    // namespace is the bound — every sleeper died with the sandbox's first
    // process, none is left on the host.
    let leftover = std::process::Command::new("sh")
        .args(["-c", "ps -eo args | grep -c '^sleep 31.713$'"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&leftover.stdout).trim(),
        "0",
        "no sleeper outlived the sandbox"
    );
}

#[tokio::test]
async fn a_file_past_the_size_cap_is_cut() {
    let l = layout();
    let limits = SandboxLimits {
        file_size_bytes: Some(1 << 20),
        ..SandboxLimits::default()
    };
    let run = sandboxed(
        &SandboxPolicy {
            limits,
            ..policy(&l)
        },
        "head -c 4000000 /dev/zero > big; echo status=$?",
    )
    .await;
    let size = std::fs::metadata(l.workspace.join("big")).unwrap().len();
    assert_eq!(
        size,
        1 << 20,
        "the write ran up to the cap and stopped there: {}",
        run.stdout
    );
    assert!(!run.stdout.contains("status=0"), "{}", run.stdout);
}

#[tokio::test]
async fn cpu_time_and_memory_are_capped() {
    let l = layout();
    let limits = SandboxLimits {
        cpu_seconds: Some(1),
        address_space_bytes: Some(256 << 20),
        ..SandboxLimits::default()
    };
    let p = SandboxPolicy {
        limits,
        ..policy(&l)
    };
    let started = Instant::now();
    let run = sandboxed(&p, "while :; do :; done").await;
    assert!(!run.ok);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "killed after its CPU second: {:?}",
        started.elapsed()
    );
    let run = sandboxed(&p, "python3 -c 'b = bytearray(64 << 20); print(\"small ok\"); b = bytearray(512 << 20); print(\"big ok\")'").await;
    assert!(
        run.stdout.contains("small ok"),
        "python ran: {} {}",
        run.stdout,
        run.stderr
    );
    assert!(
        !run.stdout.contains("big ok") && run.stderr.contains("MemoryError"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn a_stdio_server_works_through_piped_stdio() {
    let l = layout();
    let echo = "import sys\nfor line in sys.stdin:\n    sys.stdout.write('echo:' + line)\n    sys.stdout.flush()\n";
    let mut cmd = command("python3", &["-c".into(), echo.into()], &policy(&l)).unwrap();
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for msg in ["{\"jsonrpc\":\"2.0\",\"id\":1}", "second"] {
        stdin
            .write_all(format!("{msg}\n").as_bytes())
            .await
            .unwrap();
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(line.as_deref(), Some(format!("echo:{msg}").as_str()));
    }
    drop(stdin);
    assert!(child.wait().await.unwrap().success());
}

#[test]
fn a_missing_bubblewrap_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = SandboxPolicy {
        workspace: dir.path().into(),
        bwrap: Some("/nonexistent/bwrap".into()),
        ..SandboxPolicy::default()
    };
    let err = command("true", &[], &p).unwrap_err();
    assert!(
        matches!(err, SandboxError::Unavailable(ref m) if m.contains("`bubblewrap`")),
        "{err}"
    );
    // A bwrap that cannot create namespaces (here: one that always fails).
    let fake = dir.path().join("bwrap");
    let mut f = std::fs::File::create(&fake).unwrap();
    f.write_all(b"#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
        .unwrap();
    drop(f);
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let p = SandboxPolicy {
        bwrap: Some(fake),
        ..p
    };
    let err = command("true", &[], &p).unwrap_err();
    assert!(
        matches!(err, SandboxError::Unavailable(ref m) if m.contains("cannot create its namespaces") && m.contains("No permissions")),
        "{err}"
    );
}
