//! How a node reaches an authenticated store: the TLS material and credentials it presents, and
//! the authorities it checks the store's certificates against.
//!
//! The `[lease]` section reads every file when the configuration is resolved (so a bad file
//! stops `idgen serve` and `--check-config` at once, with the setting and the file named) and
//! hands the adapters what it read:
//!
//! | store | what | settings |
//! |---|---|---|
//! | etcd (`etcds://`) | TLS: an authority bundle, optionally a client certificate and key (mutual TLS), the name to verify | `etcd_ca`, `etcd_cert`, `etcd_key`, `etcd_server_name` |
//! | etcd | etcd's own authentication: a user and its password | `etcd_user`, `etcd_password_file` or `IDGEN_ETCD_PASSWORD` |
//! | PostgreSQL | the role's password | `postgres_password_file` or `IDGEN_POSTGRES_PASSWORD` |
//! | PostgreSQL (`sslmode=verify-full`) | TLS: an authority bundle, optionally a client certificate and key | `postgres_ca`, `postgres_cert`, `postgres_key` |
//! | FoundationDB | FoundationDB's TLS network options, passed through as paths | `fdb_tls_cert`, `fdb_tls_key`, `fdb_tls_ca`, `fdb_tls_verify_peers` |
//!
//! Secrets (a private key, a password) are held in [`Secret`], whose `Debug` prints nothing of
//! them, so they stay out of logs and error messages.

use std::fmt;
use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A secret value (a password, a private key in PEM): `Debug` shows only that it is set.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, to hand to the store's client (never to a log).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// A certificate chain and its private key, PEM, as read from their files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub cert_pem: String,
    pub key_pem: Secret,
}

/// TLS towards etcd (`etcds://`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    /// The authorities etcd's server certificates must chain to, PEM.
    pub ca_pem: String,
    /// The client certificate and key (mutual TLS), if etcd asks for one.
    pub identity: Option<Identity>,
    /// The name etcd's certificates must carry, instead of each endpoint's host.
    pub server_name: Option<String>,
}

/// TLS towards PostgreSQL (`sslmode=verify-full`): the server's certificate must chain to
/// `ca_pem` and name the host the URL names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgTls {
    /// The authorities PostgreSQL's server certificates must chain to, PEM.
    pub ca_pem: String,
    /// The client certificate and key, for a server that asks for one (`clientcert` in
    /// `pg_hba.conf`, or the `cert` method).
    pub identity: Option<Identity>,
}

/// An etcd user and its password (etcd's `auth enable`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdUser {
    pub name: String,
    pub password: Secret,
}

/// How to reach etcd: TLS for `etcds://`, and a user when etcd has authentication on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdAccess {
    pub tls: Option<EtcdTls>,
    pub user: Option<EtcdUser>,
}

/// FoundationDB's TLS network options (set before its network thread starts). FoundationDB
/// reads the files itself; the cluster file's coordinator addresses say whether TLS is used
/// (`host:port:tls`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FdbTls {
    /// This client's certificate chain (`TLS_CERT_PATH`).
    pub cert: Option<String>,
    /// Its private key (`TLS_KEY_PATH`).
    pub key: Option<String>,
    /// The authorities the cluster's certificates must chain to (`TLS_CA_PATH`).
    pub ca: Option<String>,
    /// FoundationDB's peer verification rules (`TLS_VERIFY_PEERS`), e.g. `Check.Valid=1`.
    pub verify_peers: Option<String>,
}

impl FdbTls {
    pub fn is_empty(&self) -> bool {
        self == &FdbTls::default()
    }
}

/// Everything a store adapter needs beyond its URL to reach an authenticated store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreAccess {
    pub etcd: EtcdAccess,
    pub fdb: FdbTls,
    /// The PostgreSQL role's password (`postgres_password_file` or `IDGEN_POSTGRES_PASSWORD`).
    pub postgres_password: Option<Secret>,
    /// TLS towards PostgreSQL, with `sslmode=verify-full`.
    pub postgres_tls: Option<PgTls>,
}

fn read_text(setting: &str, path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map_err(|e| format!("{setting}: cannot read {}: {e}", path.display()))
}

/// Reads a PEM bundle of authorities and checks that each is a certificate a TLS client can
/// trust. `setting` names the setting in errors.
pub fn read_ca_bundle(setting: &str, path: &Path) -> Result<String, String> {
    let pem = read_text(setting, path)?;
    let certs = parse_certs(setting, path, &pem)?;
    let mut roots = rustls::RootCertStore::empty();
    for (i, cert) in certs.into_iter().enumerate() {
        roots.add(cert).map_err(|e| {
            format!(
                "{setting}: certificate {} in {} is not a usable authority: {e}",
                i + 1,
                path.display()
            )
        })?;
    }
    Ok(pem)
}

/// Reads a PEM certificate chain (at least one certificate).
pub fn read_cert_chain(setting: &str, path: &Path) -> Result<String, String> {
    let pem = read_text(setting, path)?;
    parse_certs(setting, path, &pem)?;
    Ok(pem)
}

fn parse_certs(
    setting: &str,
    path: &Path,
    pem: &str,
) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{setting}: {} is not PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{setting}: {} holds no certificate (a PEM `BEGIN CERTIFICATE` block)",
            path.display()
        ));
    }
    Ok(certs)
}

/// Reads a PEM private key (PKCS#8, PKCS#1 or SEC1).
pub fn read_private_key(setting: &str, path: &Path) -> Result<Secret, String> {
    let pem = Secret::new(read_text(setting, path)?);
    parse_key(setting, path, &pem)?;
    Ok(pem)
}

fn parse_key(setting: &str, path: &Path, pem: &Secret) -> Result<PrivateKeyDer<'static>, String> {
    // The parser's error says what it found, never the key's bytes.
    PrivateKeyDer::from_pem_slice(pem.expose().as_bytes()).map_err(|e| {
        format!(
            "{setting}: {} holds no usable PEM private key ({e})",
            path.display()
        )
    })
}

/// Reads a client certificate and its key for rustls (etcd's and PostgreSQL's TLS), and checks that the key is
/// one rustls can sign with and belongs to the certificate.
pub fn read_identity(
    (cert_setting, cert_path): (&str, &Path),
    (key_setting, key_path): (&str, &Path),
) -> Result<Identity, String> {
    let cert_pem = read_text(cert_setting, cert_path)?;
    let chain = parse_certs(cert_setting, cert_path, &cert_pem)?;
    let key_pem = Secret::new(read_text(key_setting, key_path)?);
    let key = parse_key(key_setting, key_path, &key_pem)?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| {
        format!(
            "{key_setting}: the key in {} cannot sign: {e}",
            key_path.display()
        )
    })?;
    rustls::sign::CertifiedKey::new(chain, signing)
        .keys_match()
        .map_err(|e| {
            format!(
                "{key_setting}: the key in {} does not belong to the certificate in {} ({e})",
                key_path.display(),
                cert_path.display()
            )
        })?;
    Ok(Identity { cert_pem, key_pem })
}

/// Reads a password from a file: the whole file less one trailing line break, not empty.
pub fn read_password(setting: &str, path: &Path) -> Result<Secret, String> {
    let text = read_text(setting, path)?;
    let password = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    if password.is_empty() {
        return Err(format!("{setting}: {} is empty", path.display()));
    }
    Ok(Secret::new(password))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_show_in_debug() {
        let user = EtcdUser {
            name: "idgen".into(),
            password: Secret::new("hunter2"),
        };
        let shown = format!("{user:?}");
        assert!(
            shown.contains("idgen") && !shown.contains("hunter2"),
            "{shown}"
        );
    }

    #[test]
    fn passwords_lose_one_line_break_and_may_not_be_empty() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pw");
        for (text, want) in [
            ("s3cret\n", "s3cret"),
            ("s3 cret\r\n", "s3 cret"),
            ("x\n\n", "x\n"),
        ] {
            std::fs::write(&p, text).unwrap();
            assert_eq!(
                read_password("etcd_password_file", &p).unwrap().expose(),
                want
            );
        }
        std::fs::write(&p, "\n").unwrap();
        let e = read_password("etcd_password_file", &p).unwrap_err();
        assert!(
            e.contains("etcd_password_file") && e.contains("empty"),
            "{e}"
        );
        let e = read_password("etcd_password_file", &dir.path().join("none")).unwrap_err();
        assert!(e.starts_with("etcd_password_file: cannot read"), "{e}");
    }

    #[test]
    fn pem_files_are_checked_and_named_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        for e in [
            read_ca_bundle("etcd_ca", &junk).unwrap_err(),
            read_cert_chain("etcd_cert", &junk).unwrap_err(),
        ] {
            assert!(
                e.contains("junk.pem") && e.contains("no certificate"),
                "{e}"
            );
        }
        let e = read_private_key("etcd_key", &junk).unwrap_err();
        assert!(e.starts_with("etcd_key:") && e.contains("junk.pem"), "{e}");
        let e = read_ca_bundle("etcd_ca", &dir.path().join("missing.pem")).unwrap_err();
        assert!(
            e.starts_with("etcd_ca: cannot read") && e.contains("missing.pem"),
            "{e}"
        );
    }
}
