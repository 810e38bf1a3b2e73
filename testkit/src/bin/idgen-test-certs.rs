//! `idgen-test-certs DIR`: writes a set of test certificates (PEM, generated now by
//! [`idgen_testkit::TestCa`]) into DIR, for test suites outside Rust (the Python client's):
//!
//! | files | what |
//! |---|---|
//! | `ca.crt` | the authority every other certificate here is signed by, unless noted |
//! | `other-ca.crt` | an unrelated authority |
//! | `server.crt`, `server.key` | `localhost`, `127.0.0.1`, `::1`, valid now |
//! | `server-expired.*` | the same names, expired |
//! | `server-other-name.*` | `idgen.internal` only |
//! | `server-other-ca.*` | the loopback names, signed by the unrelated authority |
//! | `client.crt`, `client.key` | a client certificate, identity `idgen-test-client` |
//! | `client-expired.*` | the same identity, expired |
//! | `client-other-ca.*` | the same identity, signed by the unrelated authority |
//!
//! Keys are written with mode 0600. The files are for tests only.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use idgen_testkit::{CertFiles, TestCa, Validity};

const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "::1"];
const CLIENT: &str = "idgen-test-client";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir] = args.as_slice() else {
        eprintln!("usage: idgen-test-certs DIR");
        return ExitCode::from(2);
    };
    match write_all(Path::new(dir)) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("idgen-test-certs: {e}");
            ExitCode::from(1)
        }
    }
}

fn write_all(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let ca = TestCa::new("idgen test ca");
    let other = TestCa::new("idgen other test ca");
    let mut written = vec![
        copy_text(&ca.ca_pem, &dir.join("ca.crt"), false)?,
        copy_text(&other.ca_pem, &dir.join("other-ca.crt"), false)?,
    ];
    let sets: [(&str, CertFiles); 7] = [
        (
            "server",
            ca.server_for(&LOOPBACK, Validity::Current, "server"),
        ),
        (
            "server-expired",
            ca.server_for(&LOOPBACK, Validity::Expired, "server-expired"),
        ),
        (
            "server-other-name",
            ca.server_for(&["idgen.internal"], Validity::Current, "server-other-name"),
        ),
        (
            "server-other-ca",
            other.server_for(&LOOPBACK, Validity::Current, "server"),
        ),
        ("client", ca.client(CLIENT)),
        ("client-expired", ca.client_with(CLIENT, Validity::Expired)),
        ("client-other-ca", other.client(CLIENT)),
    ];
    for (name, files) in &sets {
        written.push(copy_text(
            &files.cert_pem,
            &dir.join(format!("{name}.crt")),
            false,
        )?);
        written.push(copy_text(
            &files.key_pem,
            &dir.join(format!("{name}.key")),
            true,
        )?);
    }
    Ok(written)
}

fn copy_text(text: &str, to: &Path, private: bool) -> std::io::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(to)?;
    file.write_all(text.as_bytes())?;
    Ok(to.to_owned())
}
