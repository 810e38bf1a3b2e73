//! `idgen-test-certs`, the certificate writer the other languages' client suites use: every
//! file it names is written, parses, and means what its name says (a TLS handshake against
//! the written authority succeeds for `server.*` and fails for the expired and foreign ones).
//!
//! Being an integration test of this package, it also makes `cargo test` build the binary
//! itself, which `scripts/test` then hands to those suites (no second build of it).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

const BIN: &str = env!("CARGO_BIN_EXE_idgen-test-certs");

const SETS: [&str; 7] = [
    "server",
    "server-expired",
    "server-other-name",
    "server-other-ca",
    "client",
    "client-expired",
    "client-other-ca",
];

fn written(dir: &Path) -> Vec<String> {
    let out = Command::new(BIN)
        .arg(dir)
        .output()
        .expect("run idgen-test-certs");
    assert!(
        out.status.success(),
        "idgen-test-certs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8 file list")
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_named_file_is_written_and_parses_and_keys_are_private() {
    let dir = tempfile::tempdir().unwrap();
    let listed = written(dir.path());
    let mut expected = vec!["ca.crt".to_owned(), "other-ca.crt".to_owned()];
    for set in SETS {
        expected.push(format!("{set}.crt"));
        expected.push(format!("{set}.key"));
    }
    let names: Vec<String> = listed
        .iter()
        .map(|p| {
            Path::new(p)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(names, expected, "the files printed, in order");
    for path in &listed {
        let path = Path::new(path);
        assert_eq!(
            path.parent(),
            Some(dir.path()),
            "{} is outside DIR",
            path.display()
        );
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        if path.extension().unwrap() == "key" {
            assert_eq!(mode, 0o600, "{} must be private", path.display());
            PrivateKeyDer::from_pem_file(path)
                .unwrap_or_else(|e| panic!("{}: no private key: {e:?}", path.display()));
        } else {
            assert_eq!(mode, 0o644, "{}", path.display());
            let certs: Vec<_> = CertificateDer::pem_file_iter(path)
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap_or_else(|e| panic!("{}: bad PEM: {e:?}", path.display()));
            assert_eq!(certs.len(), 1, "{}: one certificate", path.display());
        }
    }
}

#[test]
fn without_a_directory_it_prints_usage_and_exits_2() {
    let out = Command::new(BIN).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: idgen-test-certs DIR"));
}

/// Runs a TLS handshake in memory: a client trusting `ca.crt` (for the name `localhost`)
/// against a server presenting `{set}.crt`.
fn handshake(dir: &Path, set: &str) -> Result<(), rustls::Error> {
    let ca_pem = std::fs::read_to_string(dir.join("ca.crt")).unwrap();
    let client_config = idgen_testkit::certs::client_config(&ca_pem, None, b"idgen/1");
    let certs = CertificateDer::pem_file_iter(dir.join(format!("{set}.crt")))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join(format!("{set}.key"))).unwrap();
    let server_config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let mut client = rustls::ClientConnection::new(client_config, "localhost".try_into().unwrap())?;
    let mut server = rustls::ServerConnection::new(Arc::new(server_config))?;
    let mut wire = Vec::new();
    // A handshake takes two round trips; a few more rounds than that means it is stuck.
    for _ in 0..8 {
        if !client.is_handshaking() && !server.is_handshaking() {
            return Ok(());
        }
        wire.clear();
        client.write_tls(&mut wire).unwrap();
        server.read_tls(&mut wire.as_slice()).unwrap();
        server.process_new_packets()?;
        wire.clear();
        server.write_tls(&mut wire).unwrap();
        client.read_tls(&mut wire.as_slice()).unwrap();
        client.process_new_packets()?;
    }
    panic!("the handshake with {set}.crt did not finish");
}

#[test]
fn the_server_certificates_mean_what_their_names_say() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path());
    handshake(dir.path(), "server").expect("server.crt is valid for localhost under ca.crt");
    for bad in ["server-expired", "server-other-name", "server-other-ca"] {
        let err = handshake(dir.path(), bad).expect_err(bad);
        assert!(
            matches!(err, rustls::Error::InvalidCertificate(_)),
            "{bad}: {err:?}"
        );
    }
}
