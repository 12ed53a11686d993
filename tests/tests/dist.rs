//! `./dev dist`'s packing (`scripts/dist.sh`) run on the binary the tests
//! use: the tarball's sum checks, it holds what docs/deploy.md lists, the
//! binary inside runs and carries every bundled plugin, and the systemd units
//! passed `systemd-analyze verify` (when it is installed) and keep the
//! hardening docs/deploy.md promises.

use std::path::Path;
use std::process::Command;

use sonde_e2e::*;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?}:\n{text}");
    text
}

#[test]
fn the_release_tarball_holds_a_working_sonde_and_hardened_units() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("dist");
    let mut pack = Command::new("bash");
    pack.arg(repo().join("scripts/dist.sh"))
        .env("DIST_SONDE_BIN", sonde_bin())
        .env("DIST_OUT", &out)
        .current_dir(tmp.path());
    if !repo().join("web/dist/index.html").is_file() {
        // This build embedded the placeholder page, as build.rs does without web/dist.
        pack.env("DIST_PLACEHOLDER_OK", "1");
    }
    let said = run(&mut pack);
    let has_systemd_analyze = Command::new("systemd-analyze").arg("--version").output().is_ok();
    assert_eq!(
        !said.contains("the units were not verified"),
        has_systemd_analyze,
        "{said}"
    );

    let version = run(Command::new(sonde_bin()).arg("--version"));
    let version = version.split_whitespace().nth(1).unwrap();
    let arch = run(Command::new("uname").arg("-m"));
    let name = format!("sonde-{version}-{}-linux", arch.trim());
    let tarball = format!("{name}.tar.gz");
    run(Command::new("sha256sum")
        .args(["-c", &format!("{tarball}.sha256")])
        .current_dir(&out));

    let listing = run(Command::new("tar").args(["tzf", &tarball]).current_dir(&out));
    let mut files: Vec<&str> = listing
        .lines()
        .filter(|l| !l.ends_with('/'))
        .map(|l| {
            l.strip_prefix(&format!("{name}/"))
                .unwrap_or_else(|| panic!("{l} outside {name}/"))
        })
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "LICENSE",
            "README.md",
            "config/agent.toml",
            "config/master.toml",
            "docs/deploy.md",
            "sonde",
            "systemd/sonde-agent.service",
            "systemd/sonde-master.service",
        ]
    );

    // Unpacked elsewhere, the binary alone carries the plugins.
    let unpacked = tmp.path().join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    run(Command::new("tar")
        .arg("xzf")
        .arg(out.join(&tarball))
        .arg("-C")
        .arg(&unpacked));
    let root = unpacked.join(&name);
    let extracted = tmp.path().join("plugins");
    run(Command::new(root.join("sonde"))
        .args(["plugins", "extract"])
        .arg(&extracted));
    let count = |d: &Path| std::fs::read_dir(d).unwrap().count();
    assert_eq!(count(&extracted), count(&repo().join("target/plugins/bundled")));

    for unit in ["sonde-agent", "sonde-master"] {
        let text = std::fs::read_to_string(root.join(format!("systemd/{unit}.service"))).unwrap();
        for line in [
            "DynamicUser=yes",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "CapabilityBoundingSet=",
            "LimitRTPRIO=1",
            "ExecStart=/usr/local/bin/sonde --config /etc/sonde/sonde.toml",
        ] {
            assert!(text.lines().any(|l| l.starts_with(line)), "{unit}: no {line}");
        }
        assert!(text.contains(&format!("StateDirectory={unit}")), "{unit}");
    }
}
