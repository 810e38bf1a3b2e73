//! `[tls]`: TLS and mutual TLS on the node's listeners. The node's certificate and key, the
//! authority its clients' certificates must chain to, and which listener uses them: the ID
//! protocol over TLS on an address of its own, the HTTP ID API, the admin port. Taken by the
//! TLS acceptors ([`crate::node::tls`]).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{duration, err, parse_addr_or_off, ser, ConfigError};

settings! {
    /// The `[tls]` settings as given: flags, `IDGEN_*` variables, the file's `[tls]`.
    #[derive(Args, Deserialize, Debug, Default, Clone)]
    #[serde(default, deny_unknown_fields)]
    #[command(next_help_heading = "TLS ([tls] in the file)")]
    pub struct TlsArgs {
        /// The node's certificate chain, PEM (re-read when it changes) [default: none].
        #[arg(long, env = "IDGEN_TLS_CERT")]
        pub tls_cert: Option<PathBuf>,
        /// The private key of the certificate, PEM (re-read when it changes) [default: none].
        #[arg(long, env = "IDGEN_TLS_KEY")]
        pub tls_key: Option<PathBuf>,
        /// Authorities (PEM bundle) that client certificates must chain to. When set, the ID
        /// protocol's TLS listener and an HTTPS ID API require a client certificate (mutual TLS)
        /// [default: none].
        #[arg(long, env = "IDGEN_TLS_CLIENT_CA")]
        pub tls_client_ca: Option<PathBuf>,
        /// Address of the ID protocol over TLS (TLS from the first byte); `off` disables it.
        #[arg(long, env = "IDGEN_TLS_LISTEN")]
        pub tls_listen: Option<String>,
        /// The HTTP ID API serves HTTPS instead of HTTP (true or false).
        #[arg(long, env = "IDGEN_TLS_HTTP")]
        pub tls_http: Option<bool>,
        /// TLS on the admin port: off, tls, or mtls (client certificates from tls_client_ca).
        #[arg(long, env = "IDGEN_TLS_ADMIN")]
        pub tls_admin: Option<String>,
        /// How often the certificate, key and client authorities are checked for changes.
        #[arg(long, env = "IDGEN_TLS_RELOAD_INTERVAL")]
        pub tls_reload_interval: Option<String>,
    }
}

/// TLS on the admin port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AdminTls {
    /// Plain HTTP.
    #[default]
    Off,
    /// HTTPS; no client certificate asked for (probes and scrapers without one reach it).
    Tls,
    /// HTTPS with a client certificate that chains to `tls_client_ca`.
    Mtls,
}

impl FromStr for AdminTls {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s.trim() {
            "off" | "false" => Ok(AdminTls::Off),
            "tls" | "on" | "true" => Ok(AdminTls::Tls),
            "mtls" => Ok(AdminTls::Mtls),
            other => Err(err(format!(
                "tls_admin: {other:?} is not one of off, tls, mtls"
            ))),
        }
    }
}

impl fmt::Display for AdminTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AdminTls::Off => "off",
            AdminTls::Tls => "tls",
            AdminTls::Mtls => "mtls",
        })
    }
}

/// The `[tls]` section, resolved: every TLS front has a certificate and key to serve, and
/// every one that asks for client certificates has authorities to check them against.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TlsSection {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_client_ca: Option<PathBuf>,
    /// `None`: no TLS listener for the ID protocol.
    #[serde(serialize_with = "ser::addr_or_off")]
    pub tls_listen: Option<SocketAddr>,
    pub tls_http: bool,
    #[serde(serialize_with = "ser::display")]
    pub tls_admin: AdminTls,
    #[serde(serialize_with = "ser::duration")]
    pub tls_reload_interval: Duration,
}

impl Default for TlsSection {
    fn default() -> Self {
        TlsSection {
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tls_listen: None,
            tls_http: false,
            tls_admin: AdminTls::Off,
            tls_reload_interval: Duration::from_secs(10),
        }
    }
}

impl TlsSection {
    /// Resolves and validates the section.
    pub fn resolve(given: TlsArgs) -> Result<TlsSection, ConfigError> {
        let d = TlsSection::default();
        let tls_listen = match given.tls_listen {
            Some(text) => parse_addr_or_off("tls_listen", &text)?,
            None => d.tls_listen,
        };
        let tls_admin = match given.tls_admin {
            Some(text) => text.parse()?,
            None => d.tls_admin,
        };
        let section = TlsSection {
            tls_cert: given.tls_cert,
            tls_key: given.tls_key,
            tls_client_ca: given.tls_client_ca,
            tls_listen,
            tls_http: given.tls_http.unwrap_or(d.tls_http),
            tls_admin,
            tls_reload_interval: duration(
                "tls_reload_interval",
                given.tls_reload_interval,
                d.tls_reload_interval,
            )?,
        };
        if section.tls_reload_interval.is_zero() {
            return Err(err("tls_reload_interval: must be more than 0"));
        }
        let listeners = section.listeners();
        match (&section.tls_cert, &section.tls_key) {
            (Some(_), Some(_)) => {}
            (None, None) if listeners.is_empty() => {}
            (Some(_), None) => return Err(err("tls_cert is set but tls_key is not")),
            (None, Some(_)) => return Err(err("tls_key is set but tls_cert is not")),
            (None, None) => {
                return Err(err(format!(
                    "{} needs tls_cert and tls_key (the node's certificate chain and key, PEM)",
                    listeners.join(" and ")
                )))
            }
        }
        if section.tls_cert.is_some() && listeners.is_empty() {
            return Err(err(
                "tls_cert is set but no listener uses TLS: set tls_listen, tls_http or tls_admin",
            ));
        }
        if tls_admin == AdminTls::Mtls && section.tls_client_ca.is_none() {
            return Err(err(
                "tls_admin = mtls needs tls_client_ca (the authorities client certificates must chain to)",
            ));
        }
        if section.tls_client_ca.is_some()
            && section.tls_listen.is_none()
            && !section.tls_http
            && tls_admin != AdminTls::Mtls
        {
            return Err(err(
                "tls_client_ca is set but no listener asks for client certificates: set tls_listen, tls_http or tls_admin = mtls",
            ));
        }
        Ok(section)
    }

    /// The listeners that use TLS, named as their settings are.
    pub fn listeners(&self) -> Vec<&'static str> {
        let mut listeners = Vec::new();
        if self.tls_listen.is_some() {
            listeners.push("tls_listen");
        }
        if self.tls_http {
            listeners.push("tls_http");
        }
        if self.tls_admin != AdminTls::Off {
            listeners.push("tls_admin");
        }
        listeners
    }

    /// Whether the data-plane TLS listeners (the ID protocol's and the HTTPS ID API) require
    /// client certificates.
    pub fn mutual(&self) -> bool {
        self.tls_client_ca.is_some()
    }
}
