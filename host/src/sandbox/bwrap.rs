//! bubblewrap's arguments for a [`SandboxPolicy`]: namespaces, the mounts
//! (system read-only, the workspace, the extra read-only paths, hidden
//! paths covered), the working directory and the environment. The book's
//! security/os-sandbox.md lists them; keep the two in step.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use super::{SandboxError, SandboxPolicy, env};

/// The top-level system directories bound read-only when they exist (a
/// symlink, as on merged-/usr systems, is recreated as the same symlink).
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// The pieces of `/etc` a program needs to start and to know who it is:
/// the dynamic loader's cache and config, users and groups, name-service
/// switch, the time zone, and the alternatives that /usr/bin symlinks
/// point into. Never the whole of /etc (it holds host secrets: shadow,
/// ssh host keys, credentials of other services).
const ETC_ALWAYS: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/os-release",
    "/etc/mime.types",
];

/// With the network: name resolution and the TLS trust store.
const ETC_NETWORK: &[&str] = &[
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
];

/// One mount, in the order bubblewrap must apply it (a later mount covers
/// an earlier one at or under its path).
#[derive(Debug)]
enum Mount {
    ReadOnly(PathBuf),
    ReadWrite(PathBuf),
    /// An empty read-only directory over a hidden path.
    Hide(PathBuf),
}

impl Mount {
    fn path(&self) -> &Path {
        match self {
            Mount::ReadOnly(p) | Mount::ReadWrite(p) | Mount::Hide(p) => p,
        }
    }
}

/// Every argument before the program: namespaces, mounts, working
/// directory, environment.
pub(super) fn arguments(policy: &SandboxPolicy) -> Result<Vec<OsString>, SandboxError> {
    let workspace = existing_dir(&policy.workspace, "the workspace")?;
    if workspace == Path::new("/") {
        return Err(SandboxError::Policy(
            "the workspace cannot be the root directory /".into(),
        ));
    }
    let cwd = match &policy.cwd {
        None => workspace.clone(),
        Some(cwd) => {
            let cwd = if cwd.is_absolute() {
                cwd.clone()
            } else {
                workspace.join(cwd)
            };
            let cwd = existing_dir(&cwd, "the working directory")?;
            if !cwd.starts_with(&workspace) {
                return Err(SandboxError::Policy(format!(
                    "the working directory {} is outside the workspace {}",
                    cwd.display(),
                    workspace.display()
                )));
            }
            cwd
        }
    };

    let mut a: Vec<OsString> = Vec::new();
    let mut push = |items: &[&str]| a.extend(items.iter().map(OsString::from));
    // Namespaces. The user namespace comes first: without it, a host that
    // runs as root would give the sandbox real root.
    push(&[
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]);
    if !policy.network {
        push(&["--unshare-net"]);
    }
    push(&[
        // No nested user namespaces (a way to regain capabilities), and no
        // capabilities at all, also when the host runs as root.
        "--disable-userns",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        // A new session: no TIOCSTI into the host's terminal.
        "--new-session",
        "--hostname",
        "chitin-sandbox",
    ]);

    // System, read-only.
    for dir in SYSTEM_DIRS {
        system_entry(&mut a, Path::new(dir));
    }
    for file in ETC_ALWAYS
        .iter()
        .chain(if policy.network { ETC_NETWORK } else { &[] })
    {
        system_entry(&mut a, Path::new(file));
    }
    a.extend(
        [
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp",
        ]
        .map(OsString::from),
    );

    // The policy's mounts, parents before children so that a hidden path
    // inside a bound directory is covered, and a bound path inside a hidden
    // one is bound again on top.
    let mut mounts = vec![if policy.workspace_read_only {
        Mount::ReadOnly(workspace.clone())
    } else {
        Mount::ReadWrite(workspace.clone())
    }];
    for path in &policy.read_only_paths {
        let path = existing(path, "a read-only path")?;
        if path == Path::new("/") {
            return Err(SandboxError::Policy(
                "a read-only path cannot be the root directory /".into(),
            ));
        }
        mounts.push(Mount::ReadOnly(path));
    }
    let bound: Vec<PathBuf> = mounts.iter().map(|m| m.path().to_path_buf()).collect();
    for hidden in &policy.hidden_paths {
        // A path that does not exist cannot be seen; one that exists is
        // covered only where a bound directory contains it (elsewhere it is
        // absent from the sandbox's root anyway).
        let Ok(hidden) = hidden.canonicalize() else {
            continue;
        };
        if hidden.is_dir() && bound.iter().any(|b| hidden.starts_with(b) && hidden != *b) {
            mounts.push(Mount::Hide(hidden));
        } else if bound.iter().any(|b| hidden.starts_with(b) && hidden != *b) {
            return Err(SandboxError::Policy(format!(
                "the hidden file {} lies inside a bound directory; hide its directory instead",
                hidden.display()
            )));
        }
    }
    // Depth first, then hides before binds at the same depth.
    mounts.sort_by_key(|m| (m.path().components().count(), !matches!(m, Mount::Hide(_))));
    for mount in &mounts {
        match mount {
            Mount::ReadOnly(p) => a.extend(["--ro-bind".into(), p.into(), p.into()]),
            Mount::ReadWrite(p) => a.extend(["--bind".into(), p.into(), p.into()]),
            Mount::Hide(p) => a.extend(["--tmpfs".into(), p.into()]),
        }
    }
    // The covers turn read-only last: bubblewrap creates the mount points
    // of the paths bound inside them first.
    for mount in &mounts {
        if let Mount::Hide(p) = mount {
            a.extend(["--remount-ro".into(), p.into()]);
        }
    }

    a.extend(["--chdir".into(), cwd.into_os_string()]);
    a.push("--clearenv".into());
    for (name, value) in env::environment(&workspace, &policy.env)? {
        a.extend(["--setenv".into(), name.into(), value.into()]);
    }
    Ok(a)
}

/// A system path, read-only when it exists: a symlink is recreated as
/// itself (its target is bound on its own), anything else bound.
fn system_entry(a: &mut Vec<OsString>, path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            if let Ok(target) = std::fs::read_link(path) {
                a.extend(["--symlink".into(), target.into_os_string(), path.into()]);
            }
        }
        Ok(_) => a.extend(["--ro-bind".into(), path.into(), path.into()]),
        Err(_) => {}
    }
}

/// `path` made canonical (symlinks resolved, so that the bound path is the
/// real one and `..` cannot lead elsewhere); it must be absolute and exist.
fn existing(path: &Path, what: &str) -> Result<PathBuf, SandboxError> {
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return Err(SandboxError::Policy(format!(
            "{what} must be an absolute path without `..`: {}",
            path.display()
        )));
    }
    path.canonicalize()
        .map_err(|e| SandboxError::Policy(format!("{what} {} cannot be used: {e}", path.display())))
}

fn existing_dir(path: &Path, what: &str) -> Result<PathBuf, SandboxError> {
    let path = existing(path, what)?;
    if !path.is_dir() {
        return Err(SandboxError::Policy(format!(
            "{what} {} is not a directory",
            path.display()
        )));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(workspace: &Path) -> SandboxPolicy {
        SandboxPolicy {
            workspace: workspace.to_path_buf(),
            ..SandboxPolicy::default()
        }
    }

    fn strings(a: &[OsString]) -> Vec<String> {
        a.iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn no_network_unshares_it_and_binds_no_resolver() {
        let dir = tempfile::tempdir().unwrap();
        let a = strings(&arguments(&policy(dir.path())).unwrap());
        assert!(a.contains(&"--unshare-net".to_string()));
        assert!(!a.contains(&"/etc/resolv.conf".to_string()));
        let mut p = policy(dir.path());
        p.network = true;
        let a = strings(&arguments(&p).unwrap());
        assert!(!a.contains(&"--unshare-net".to_string()));
    }

    #[test]
    fn a_hidden_parent_is_covered_before_the_workspace_inside_it_is_bound() {
        let data = tempfile::tempdir().unwrap();
        let ws = data.path().join("workspace");
        std::fs::create_dir(&ws).unwrap();
        let mut p = policy(&ws);
        // The data dir's parent is bound read-only (as a careless extra
        // path would): the data dir is covered, the workspace bound on top.
        p.read_only_paths
            .push(data.path().parent().unwrap().to_path_buf());
        p.hidden_paths.push(data.path().to_path_buf());
        let a = strings(&arguments(&p).unwrap());
        let data = data.path().canonicalize().unwrap().display().to_string();
        let ws = ws.canonicalize().unwrap().display().to_string();
        let hide = a
            .iter()
            .position(|s| *s == data)
            .expect("the data dir is covered");
        assert_eq!(a[hide - 1], "--tmpfs");
        let bind = a.iter().rposition(|s| *s == ws).unwrap();
        assert!(bind > hide, "{a:?}");
    }

    #[test]
    fn bad_policies_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            arguments(&policy(Path::new("/"))),
            Err(SandboxError::Policy(_))
        ));
        assert!(matches!(
            arguments(&policy(Path::new("relative"))),
            Err(SandboxError::Policy(_))
        ));
        assert!(matches!(
            arguments(&policy(&dir.path().join("missing"))),
            Err(SandboxError::Policy(_))
        ));
        let mut p = policy(dir.path());
        p.cwd = Some(PathBuf::from("/tmp"));
        assert!(matches!(arguments(&p), Err(SandboxError::Policy(_))));
        let mut p = policy(dir.path());
        p.env.push(("A=B".into(), "x".into()));
        assert!(matches!(arguments(&p), Err(SandboxError::Policy(_))));
    }
}
