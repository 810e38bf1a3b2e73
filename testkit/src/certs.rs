//! Certificates for the TLS tests, generated when a test runs (never committed): a certificate
//! authority, server certificates for `localhost` and the loopback addresses, client
//! certificates with a chosen identity, an expired one, and ones from an unrelated authority.
//! Each is written as PEM files into a temporary directory that lives as long as the value.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

/// A certificate and its private key, as PEM text and as files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PEM (PKCS#8).
    pub key_pem: String,
    /// Where the certificate was written.
    pub cert: PathBuf,
    /// Where the key was written.
    pub key: PathBuf,
}

/// A certificate authority that signs server and client certificates for tests.
pub struct TestCa {
    name: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: tempfile::TempDir,
    /// The authority's certificate, PEM: the bundle a peer verifies against.
    pub ca_pem: String,
    /// Where the authority's certificate was written.
    pub ca: PathBuf,
}

/// How long a certificate is valid, relative to now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// From a day ago for a year.
    Current,
    /// Expired: from 30 days ago until yesterday.
    Expired,
    /// Not yet valid: from tomorrow.
    NotYet,
}

impl TestCa {
    /// A new authority named `name` (its subject's common name), with its files in a temporary
    /// directory of its own.
    pub fn new(name: &str) -> TestCa {
        let dir = tempfile::Builder::new()
            .prefix("idgen-certs-")
            .tempdir()
            .expect("temporary directory for certificates");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.distinguished_name = dn(name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        set_validity(&mut params, Validity::Current);
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("CA certificate");
        let ca_pem = issuer.pem();
        let ca = dir.path().join(format!("{}-ca.crt", file_stem(name)));
        std::fs::write(&ca, &ca_pem).expect("write CA certificate");
        TestCa {
            name: name.to_owned(),
            issuer,
            dir,
            ca_pem,
            ca,
        }
    }

    /// The authority's name, as given to [`TestCa::new`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The directory the files are written into.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A server certificate for `localhost`, `127.0.0.1` and `::1`, valid now.
    pub fn server(&self) -> CertFiles {
        self.server_for(
            &["localhost", "127.0.0.1", "::1"],
            Validity::Current,
            "server",
        )
    }

    /// A server certificate for these names (DNS names or IP addresses), written as
    /// `<file>.crt` and `<file>.key`.
    pub fn server_for(&self, names: &[&str], validity: Validity, file: &str) -> CertFiles {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("server certificate names");
        params.distinguished_name = dn("idgen test server");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        set_validity(&mut params, validity);
        self.sign(params, file)
    }

    /// A client certificate whose identity is `identity`: its subject's common name, and a URI
    /// SAN when it looks like one (`spiffe://…`), else a DNS SAN.
    pub fn client(&self, identity: &str) -> CertFiles {
        self.client_with(identity, Validity::Current)
    }

    /// A client certificate as [`TestCa::client`], with the given validity.
    pub fn client_with(&self, identity: &str, validity: Validity) -> CertFiles {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client parameters");
        params.distinguished_name = dn(identity);
        params.subject_alt_names = vec![if identity.contains("://") {
            SanType::URI(identity.try_into().expect("URI SAN"))
        } else {
            SanType::DnsName(identity.try_into().expect("DNS SAN"))
        }];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        set_validity(&mut params, validity);
        let file = match validity {
            Validity::Current => format!("client-{}", file_stem(identity)),
            Validity::Expired => format!("client-{}-expired", file_stem(identity)),
            Validity::NotYet => format!("client-{}-notyet", file_stem(identity)),
        };
        self.sign(params, &file)
    }

    fn sign(&self, params: CertificateParams, file: &str) -> CertFiles {
        let key = KeyPair::generate().expect("key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("sign certificate");
        let cert_pem = cert.pem();
        let key_pem = key.serialize_pem();
        let cert_path = self.dir.path().join(format!("{file}.crt"));
        let key_path = self.dir.path().join(format!("{file}.key"));
        std::fs::write(&cert_path, &cert_pem).expect("write certificate");
        std::fs::write(&key_path, &key_pem).expect("write key");
        CertFiles {
            cert_pem,
            key_pem,
            cert: cert_path,
            key: key_path,
        }
    }
}

/// A client configuration that trusts `ca_pem` (PEM, one or more certificates), presents
/// `client` when given, and offers ALPN `alpn` (e.g. `idgen/1`, `http/1.1`).
pub fn client_config(ca_pem: &str, client: Option<&CertFiles>, alpn: &[u8]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(der.expect("CA PEM")).expect("CA certificate");
    }
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots);
    let mut config = match client {
        Some(files) => {
            let chain = CertificateDer::pem_slice_iter(files.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .expect("client certificate PEM");
            let key = PrivateKeyDer::from_pem_slice(files.key_pem.as_bytes()).expect("client key");
            builder
                .with_client_auth_cert(chain, key)
                .expect("client certificate and key")
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

fn dn(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

fn set_validity(params: &mut CertificateParams, validity: Validity) {
    let now = time::OffsetDateTime::now_utc();
    let day = time::Duration::days(1);
    let (from, until) = match validity {
        Validity::Current => (now - day, now + day * 365),
        Validity::Expired => (now - day * 30, now - day),
        Validity::NotYet => (now + day, now + day * 30),
    };
    params.not_before = from;
    params.not_after = until;
}

fn file_stem(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_pem_files_that_read_back() {
        let ca = TestCa::new("test ca");
        let server = ca.server();
        let client = ca.client("spiffe://cluster.local/ns/a/sa/b");
        let expired = ca.client_with("billing", Validity::Expired);
        for files in [&server, &client, &expired] {
            assert_eq!(
                std::fs::read_to_string(&files.cert).unwrap(),
                files.cert_pem
            );
            assert!(files.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
            assert!(files.key_pem.contains("PRIVATE KEY-----"));
        }
        assert!(std::fs::read_to_string(&ca.ca)
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE"));
        assert_ne!(client.cert, expired.cert);
    }
}
