//! The kit's etcd cluster (`idgen_testkit::etcd`), plus what needs the server crate itself.

#[allow(unused_imports)] // each test binary uses a different part
pub use idgen_testkit::etcd::*;

/// Writes, straight into etcd, the worker record of a rival grant over `first..first + count`
/// in namespace `default` under `prefix`: held or released by an owner of another instance,
/// with a new generation and `lease_end` (ID ms). A holder of that range finds its lease lost
/// at its next renewal; a released record gives the range back above `lease_end`.
#[cfg(feature = "etcd")]
pub fn write_rival_record(
    cluster: &EtcdCluster,
    prefix: &str,
    first: u64,
    count: u64,
    state: idgen_core::lease::WorkerState,
    lease_end: u64,
) {
    use idgen_core::store::{KvStore, Write};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let store =
            idgen_core::store::etcd::EtcdStore::connect(cluster.endpoints(), prefix.to_string())
                .await
                .expect("connect to etcd");
        let now = idgen_testkit::wall_ms();
        let record = idgen_core::lease::WorkerRecord {
            state,
            owner: idgen_core::lease::Owner::this_process(Some("rival".into()), now),
            generation: 1_000_000 + first,
            lease_end,
            count,
            layout_version: idgen_core::lease::LAYOUT_VERSION,
            written_unix_ms: now,
        };
        let writes = [Write::Put {
            key: format!("idgen/default/workers/{first:05}").into_bytes(),
            value: serde_json::to_vec(&record).expect("record"),
        }];
        store
            .commit(&[], &writes)
            .await
            .expect("write the rival record");
    })
}

/// How a test's own etcd client reaches a cluster: TLS material (a CA, and a client
/// certificate for `--client-cert-auth`), and a user.
#[cfg(feature = "etcd")]
#[derive(Default)]
pub struct ClientAuth<'a> {
    /// The authority of etcd's certificate, for a TLS cluster.
    pub ca: Option<&'a std::path::Path>,
    /// A client certificate of the cluster's authority.
    pub cert: Option<&'a idgen_testkit::CertFiles>,
    /// A user and its password, once authentication is on.
    pub user: Option<(&'a str, &'a str)>,
}

/// An etcd user for [`enable_auth`]: its password, and the key prefix its role may read and
/// write (`None`: no role, so no permission at all).
#[cfg(feature = "etcd")]
pub struct TestUser<'a> {
    pub name: &'a str,
    pub password: &'a str,
    pub readwrite_prefix: Option<&'a str>,
}

/// An etcd-client connected to `cluster` as `auth` says.
#[cfg(feature = "etcd")]
pub async fn connect_client(cluster: &EtcdCluster, auth: &ClientAuth<'_>) -> etcd_client::Client {
    use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
    let mut options = ConnectOptions::new().with_timeout(std::time::Duration::from_secs(5));
    let endpoints: Vec<String> = match cluster.tls() {
        Some(_) => {
            let ca = auth.ca.expect("a TLS cluster needs the CA");
            let ca = std::fs::read(ca).expect("read the CA");
            let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
            if let Some(c) = auth.cert {
                tls = tls.identity(Identity::from_pem(&c.cert_pem, &c.key_pem));
            }
            options = options.with_tls(tls);
            cluster
                .endpoints()
                .iter()
                .map(|e| format!("https://{e}"))
                .collect()
        }
        None => cluster.endpoints(),
    };
    if let Some((name, password)) = auth.user {
        options = options.with_user(name, password);
    }
    etcd_client::Client::connect(endpoints, Some(options))
        .await
        .unwrap_or_else(|e| panic!("connect to etcd {}: {e}", cluster.url("")))
}

/// Turns on etcd's authentication (`auth enable`): a `root` user with `root_password` and the
/// root role, and each of `users` with its password and, when it has a prefix, a role of its
/// own name granting readwrite on every key under it. `auth` is how to reach the cluster before
/// authentication is on (TLS material for a TLS cluster).
#[cfg(feature = "etcd")]
pub fn enable_auth(
    cluster: &EtcdCluster,
    auth: &ClientAuth<'_>,
    root_password: &str,
    users: &[TestUser<'_>],
) {
    use etcd_client::Permission;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut c = connect_client(cluster, auth).await;
        c.user_add("root", root_password, None)
            .await
            .expect("add the root user");
        c.user_grant_role("root", "root")
            .await
            .expect("grant root the root role");
        for u in users {
            c.user_add(u.name, u.password, None)
                .await
                .unwrap_or_else(|e| panic!("add user {}: {e}", u.name));
            if let Some(prefix) = u.readwrite_prefix {
                c.role_add(u.name)
                    .await
                    .unwrap_or_else(|e| panic!("add role {}: {e}", u.name));
                c.role_grant_permission(u.name, Permission::read_write(prefix).with_prefix())
                    .await
                    .unwrap_or_else(|e| panic!("grant role {} on {prefix:?}: {e}", u.name));
                c.user_grant_role(u.name, u.name)
                    .await
                    .unwrap_or_else(|e| panic!("grant user {} its role: {e}", u.name));
            }
        }
        c.auth_enable().await.expect("auth enable");
    })
}
