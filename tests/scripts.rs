//! The first run (`scripts/demo.sh` → `scripts/install-deps.sh --demo`)
//! on a machine that is not ready: the toolchain is checked before any
//! package is installed, a held apt lock is waited for, and the demo
//! installs only the lab's and the build's packages. Run against fake
//! `rustc`, `cargo`, `apt-get` and `dpkg-query` on a PATH of their own:
//! nothing is installed on this machine.
#![allow(clippy::disallowed_methods)] // the tests run the scripts.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A PATH directory holding the shell tools the script uses and the
/// given fakes (name, shell body).
fn fake_path(dir: &Path, fakes: &[(&str, &str)]) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in [
        "bash", "sed", "awk", "sort", "head", "grep", "mktemp", "cat", "rm", "sleep", "dirname",
    ] {
        let real = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{tool} not found"));
        std::os::unix::fs::symlink(real, bin.join(tool)).unwrap();
    }
    for (name, body) in fakes {
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/usr/bin/bash\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

fn install_deps(bin: &Path, args: &[&str]) -> Output {
    Command::new("/usr/bin/bash")
        .arg(root().join("scripts/install-deps.sh"))
        .args(args)
        .env_clear()
        .env("PATH", bin)
        .env("HOME", bin)
        .output()
        .unwrap()
}

/// Debian 12's rustc 1.63: the script stops before apt is touched and says
/// how to get the version Cargo.toml asks for; without cargo, the same.
///
/// Mutation: the toolchain check moved after the installation (as it was)
/// — apt-get is called first and the test fails.
#[test]
fn install_deps_checks_the_toolchain_before_installing_anything() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("apt.log");
    let apt = format!("echo \"$*\" >> {}", log.display());
    let need = std::fs::read_to_string(root().join("Cargo.toml"))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("rust-version = \"")?
                .strip_suffix('"')
                .map(str::to_string)
        })
        .unwrap();
    let bin = fake_path(
        dir.path(),
        &[
            ("rustc", "echo 'rustc 1.63.0 (4b91a6ea7 2022-08-08)'"),
            ("cargo", "exit 0"),
            ("apt-get", &apt),
            ("dpkg-query", "exit 1"),
        ],
    );
    let out = install_deps(&bin, &["--demo"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "rustc 1.63.0 is too old: tollgate needs Rust {need} or newer"
        )),
        "{stderr}"
    );
    assert!(stderr.contains(&format!(
        "sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain {need}"
    )));
    assert!(!log.exists(), "apt-get ran before the toolchain check");

    std::fs::remove_file(bin.join("cargo")).unwrap();
    let out = install_deps(&bin, &["--demo"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no Rust toolchain on PATH"), "{stderr}");
    assert!(!log.exists());
}

/// Another process holds the apt lock for the first two calls: the script
/// says whose it is once, waits, and installs exactly the demo's packages
/// (the build's C toolchain and the lab's tools, not the test suite's).
///
/// Mutation: `apt_get` no longer retries on a held lock — the script exits
/// 1 at the first "Could not get lock" and the test fails.
#[test]
fn install_deps_waits_for_the_apt_lock_and_installs_only_the_demos_packages() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("apt.log");
    let tries = dir.path().join("tries");
    let apt = format!(
        "echo x >> {tries}
if [ \"$(grep -c x {tries})\" -le 2 ]; then
  echo 'E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)' >&2
  exit 100
fi
echo \"$*\" >> {log}",
        tries = tries.display(),
        log = log.display()
    );
    let bin = fake_path(
        dir.path(),
        &[
            ("rustc", "echo 'rustc 1.89.0 (29483883e 2025-08-04)'"),
            ("cargo", "exit 0"),
            ("apt-get", &apt),
            ("dpkg-query", "exit 1"),
        ],
    );
    let out = install_deps(&bin, &["--demo"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr
            .matches("waiting for the apt lock (held by process 4242 (apt-get))")
            .count(),
        1,
        "{stderr}"
    );
    let calls = std::fs::read_to_string(&log).unwrap();
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(
        calls,
        [
            "-o DPkg::Lock::Timeout=10 update -qq",
            "-o DPkg::Lock::Timeout=10 install -y -qq --no-install-recommends iproute2 iptables ipset curl netcat-openbsd iputils-ping python3 dnsmasq-base gcc libc6-dev",
        ]
    );
}
