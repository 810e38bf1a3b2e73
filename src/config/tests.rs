use super::*;
use idgen_core::lease::RegionScope;
use idgen_core::store::StoreUrl;
use idgen_id::DEFAULT_EPOCH_MS;

const NOW: u64 = DEFAULT_EPOCH_MS + 1_000_000;

fn listen(f: impl FnOnce(&mut ListenArgs)) -> ServeArgs {
    let mut a = ServeArgs::default();
    f(&mut a.settings.listen);
    a
}

fn lease(f: impl FnOnce(&mut LeaseArgs)) -> ServeArgs {
    let mut a = ServeArgs::default();
    f(&mut a.settings.lease);
    a
}

fn layout(f: impl FnOnce(&mut LayoutArgs)) -> ServeArgs {
    let mut a = ServeArgs::default();
    f(&mut a.settings.layout);
    a
}

#[test]
fn defaults_resolve() {
    let c = ServeArgs::default().resolve(NOW).unwrap();
    assert_eq!(c.listen.listen, Some("127.0.0.1:7420".parse().unwrap()));
    assert_eq!(c.tls, TlsSection::default());
    assert!(c.tls.listeners().is_empty());
    assert_eq!(
        c.admin.admin_listen,
        Some("127.0.0.1:7421".parse().unwrap())
    );
    assert_eq!(
        c.listen.http_listen,
        Some("127.0.0.1:7422".parse().unwrap())
    );
    assert_eq!(c.lease.store, StoreUrl::Embedded { dir: None });
    assert_eq!(c.layout, Layout::default());
    assert_eq!(c.lease.lease_ttl, Duration::from_secs(10));
    assert_eq!(c.lease.lease_safety, Duration::from_secs(20));
    assert_eq!(c.listen.workers_per_shard, 1);
    assert!(c.listen.shards >= 1);
    assert!(c.to_toml().unwrap().contains("41/10/12"));
    // The defaults are the sections' `Default`s, and nothing else.
    assert_eq!(c, ServeConfig::default());
}

#[test]
fn flags_beat_the_file_which_beats_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idgen.toml");
    std::fs::write(
        &path,
        "[listen]\nshards = 3\n[lease]\nlease_ttl = \"4s\"\nstore = \"memory\"\n\
         [layout]\nepoch = 2026-02-01T00:00:00Z\n",
    )
    .unwrap();
    let mut args = listen(|l| l.shards = Some(2));
    args.config = Some(path.clone());
    let c = args.resolve(NOW + 40 * 86_400_000).unwrap();
    assert_eq!(c.listen.shards, 2, "flag wins");
    assert_eq!(
        c.lease.lease_ttl,
        Duration::from_secs(4),
        "file wins over default"
    );
    assert_eq!(
        c.lease.lease_safety,
        Duration::from_secs(8),
        "safety follows ttl"
    );
    assert_eq!(c.lease.store, StoreUrl::Memory);
    assert_eq!(c.layout.epoch_ms(), DEFAULT_EPOCH_MS + 31 * 86_400_000);
}

#[test]
fn a_javascript_safe_layout_of_53_bits_resolves() {
    let mut args = layout(|l| {
        l.timestamp_bits = Some(41);
        l.worker_bits = Some(2);
        l.sequence_bits = Some(10);
    });
    // 2 worker bits: 4 worker IDs, for at most 4 shards.
    args.settings.listen.shards = Some(2);
    let c = args.resolve(NOW).unwrap();
    assert_eq!(c.layout.id_bits(), 53);
    assert!(c.layout.is_js_safe());
    // 62 bits: narrower than the default, not JavaScript-safe.
    let c = layout(|l| l.timestamp_bits = Some(40))
        .resolve(NOW)
        .unwrap();
    assert_eq!((c.layout.id_bits(), c.layout.is_js_safe()), (62, false));
}

#[test]
fn garbage_is_refused_with_the_setting_named() {
    let bad = |args: ServeArgs| args.resolve(NOW).unwrap_err().to_string();
    assert!(bad(lease(|l| l.lease_ttl = Some("ten seconds".into()))).starts_with("lease_ttl:"));
    assert!(bad(layout(|l| l.timestamp_bits = Some(42))).contains("sum to at most 63"));
    assert!(bad(layout(|l| {
        l.timestamp_bits = Some(20);
        l.worker_bits = Some(5);
        l.sequence_bits = Some(6);
    }))
    .contains("sum to at least 32"));
    assert!(bad(layout(|l| l.epoch = Some("2999-01-01T00:00:00Z".into()))).contains("future"));
    assert!(bad(layout(|l| l.epoch = Some("yesterday".into()))).starts_with("epoch:"));
    assert!(bad(listen(|l| l.shards = Some(0))).starts_with("shards:"));
    assert!(bad(listen(|l| {
        l.shards = Some(64);
        l.workers_per_shard = Some(32);
    }))
    .contains("do not fit"));
    assert!(bad(lease(|l| l.store = Some("redis://x".into()))).starts_with("store:"));
    assert!(bad(lease(|l| l.region = Some("1".into()))).contains("no region bits"));
    assert!(bad(listen(|l| l.max_batch = Some(0))).starts_with("max_batch:"));
    assert!(bad(lease(|l| l.namespace = Some("a/b".into()))).starts_with("namespace:"));
    let mut log = ServeArgs::default();
    log.settings.log.log_format = Some("xml".into());
    assert!(bad(log).starts_with("log_format:"));
    for level in ["verbose", "warning", "", "idgen=loud", "info,,debug=x"] {
        let mut log = ServeArgs::default();
        log.settings.log.log_level = Some(level.into());
        assert!(bad(log).starts_with("log_level"), "{level:?}");
    }
    for level in [
        "info",
        " warn ",
        "warn,idgen=debug",
        "off",
        "idgen::node=trace",
        "3",
    ] {
        let mut log = ServeArgs::default();
        log.settings.log.log_level = Some(level.into());
        let c = log
            .resolve(NOW)
            .unwrap_or_else(|e| panic!("{level:?}: {e}"));
        assert_eq!(c.log.log_level.as_deref(), Some(level.trim()));
        assert!(c.log.filter().is_ok());
    }
    let mut clock = ServeArgs::default();
    clock.settings.clock.max_rollback_wait = Some("5s".into());
    assert!(bad(clock).starts_with("max_rollback_wait:"));
    assert!(bad(listen(|l| l.http_listen = Some("localhost".into()))).starts_with("http_listen:"));
    let mut admin = ServeArgs::default();
    admin.settings.admin.admin_listen = Some("7421".into());
    assert!(bad(admin).starts_with("admin_listen:"));

    let dir = tempfile::tempdir().unwrap();
    let file = |text: &str| {
        let path = dir.path().join("x.toml");
        std::fs::write(&path, text).unwrap();
        ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        }
    };
    assert!(bad(file("shardz = 2\n")).contains("unknown field"));
    let e = bad(file("[listen]\nshardz = 2\n"));
    assert!(e.contains("unknown field") && e.contains("shardz"), "{e}");
    // A setting outside its table (the flat files of earlier versions) is told its table.
    let e = bad(file("shards = 2\n"));
    assert!(e.contains("[listen]") && e.contains("shards"), "{e}");
    let e = bad(file("[lease]\nlease_ttl = \"soon\"\n"));
    assert!(e.contains("lease_ttl:"), "{e}");
    let e = bad(file("[layout]\nepoch = -5\n"));
    assert!(e.contains("epoch: -5 is negative"), "{e}");
    let e = bad(file("[lease]\nregion = 1.5\n"));
    assert!(e.contains("region: 1.5 is neither"), "{e}");
    assert!(bad(ServeArgs {
        config: Some("/nonexistent/idgen.toml".into()),
        ..ServeArgs::default()
    })
    .contains("/nonexistent/idgen.toml"));
}

#[test]
fn regions_and_admin_off() {
    let with_region = |region: Option<&str>| {
        let mut a = ServeArgs::default();
        a.settings.layout.region_bits = Some(3);
        a.settings.lease.region = region.map(String::from);
        a.settings.admin.admin_listen = Some("off".into());
        a.settings.layout.epoch = Some(DEFAULT_EPOCH_MS.to_string());
        a.settings.listen.shards = Some(2);
        a
    };
    let c = with_region(Some("5")).resolve(NOW).unwrap();
    assert_eq!(c.lease.region, RegionScope::Region(5));
    assert_eq!(c.admin.admin_listen, None);
    assert!(c.to_toml().unwrap().contains("\nregion = 5\n"));
    assert!(c.to_toml().unwrap().contains("\nadmin_listen = \"off\"\n"));
    assert!(with_region(Some("8")).resolve(NOW).is_err());
    assert!(with_region(Some("west")).resolve(NOW).is_err());
    // Region bits without a region would lease region 0's worker IDs in every region's
    // store: refused, with both ways out named.
    let e = with_region(None).resolve(NOW).unwrap_err().to_string();
    assert!(
        e.contains("needs --region") && e.contains("--region global"),
        "{e}"
    );
    // The documented opt-in: one worker space over all regions.
    let g = with_region(Some("global")).resolve(NOW).unwrap();
    assert_eq!(g.lease.region, RegionScope::Global);
    assert!(g.to_toml().unwrap().contains("\nregion = \"global\"\n"));
    // Without region bits, the scope is the whole space; `global` says so explicitly.
    let plain = ServeArgs::default().resolve(NOW).unwrap();
    assert_eq!(plain.lease.region, RegionScope::Global);
    assert!(!plain.to_toml().unwrap().contains("\nregion ="));
}

#[test]
fn http_listen_off_and_moved() {
    for off in ["off", "none", ""] {
        let c = listen(|l| l.http_listen = Some(off.into()))
            .resolve(NOW)
            .unwrap();
        assert_eq!(c.listen.http_listen, None, "{off:?}");
        assert!(c.to_toml().unwrap().contains("\nhttp_listen = \"off\"\n"));
    }
    let c = listen(|l| l.http_listen = Some("0.0.0.0:8080".into()))
        .resolve(NOW)
        .unwrap();
    assert_eq!(c.listen.http_listen, Some("0.0.0.0:8080".parse().unwrap()));
}

/// What `--check-config` prints is a complete file that resolves to the same configuration.
#[test]
fn the_printed_configuration_reads_back_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    let mut odd = ServeArgs::default();
    let s = &mut odd.settings;
    s.listen = ListenArgs {
        listen: Some("0.0.0.0:9000".into()),
        http_listen: Some("off".into()),
        shards: Some(3),
        workers_per_shard: Some(2),
        max_connections: Some(7),
        max_batch: Some(1234),
        idle_timeout: Some("90s".into()),
        handshake_timeout: Some("1500ms".into()),
        write_timeout: Some("2m".into()),
        http_request_timeout: Some("3s".into()),
        idempotency_window: Some("90s".into()),
        idempotency_max_bytes: Some(1 << 20),
        advertise: Some("10.0.0.7:9000".into()),
    };
    s.tls = TlsArgs {
        tls_cert: Some(dir.path().join("tls.crt")),
        tls_key: Some(dir.path().join("tls.key")),
        tls_client_ca: Some(dir.path().join("ca.crt")),
        tls_listen: Some("0.0.0.0:9443".into()),
        tls_http: Some(true),
        tls_admin: Some("mtls".into()),
        tls_reload_interval: Some("1m".into()),
    };
    s.lease = LeaseArgs {
        store: Some("etcd://10.0.0.1:2379,10.0.0.2:2379/idgen".into()),
        data_dir: Some(dir.path().join("a \"quoted\" dir")),
        namespace: Some("prod-1.a_b".into()),
        node_id: Some("node \"7\" \\ west".into()),
        region: Some("2".into()),
        lease_ttl: Some("3s".into()),
        lease_safety: Some("7s".into()),
        min_id: Some(5_000_000),
        ..LeaseArgs::default()
    };
    s.layout = LayoutArgs {
        epoch: Some((DEFAULT_EPOCH_MS + 123).to_string()),
        timestamp_bits: Some(40),
        worker_bits: Some(11),
        sequence_bits: Some(12),
        region_bits: Some(2),
    };
    s.clock = ClockArgs {
        max_rollback_wait: Some("0s".into()),
        max_drift: Some("250ms".into()),
        range_warning: Some("30days".into()),
        require_sync: Some(true),
    };
    s.admin.admin_listen = Some("[::1]:7421".into());
    s.admin.admin_request_timeout = Some("20s".into());
    s.admin.metrics_legacy_names = Some(true);
    s.shutdown = ShutdownArgs {
        drain_delay: Some("5s".into()),
        shutdown_timeout: Some("1h".into()),
    };
    s.log.log_format = Some("json".into());
    for args in [ServeArgs::default(), odd, with_global_region()] {
        let c = args.resolve(NOW).unwrap();
        let text = c.to_toml().unwrap();
        let path = dir.path().join("printed.toml");
        std::fs::write(&path, &text).unwrap();
        let again = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        }
        .resolve(NOW)
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(again, c, "{text}");
        assert_eq!(again.to_toml().unwrap(), text);
        // Every section is written, every setting of it but the unset node name.
        for section in [
            "listen", "lease", "layout", "clock", "admin", "shutdown", "log",
        ] {
            assert!(
                text.contains(&format!("\n[{section}]\n")),
                "{section}: {text}"
            );
        }
        for (key, _) in defaults() {
            assert!(text.contains(&format!("\n{key} = ")), "{key}: {text}");
        }
    }
}

#[test]
fn the_legacy_metric_names_flag_is_off_unless_asked_for() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }
    use clap::Parser as _;
    for (argv, want) in [
        (&[][..], false),
        (&["--metrics-legacy-names"][..], true),
        (&["--metrics-legacy-names=true"][..], true),
        (&["--metrics-legacy-names=false"][..], false),
    ] {
        let cli = Cli::try_parse_from(["serve"].iter().chain(argv))
            .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        let c = cli.serve.resolve(NOW).unwrap();
        assert_eq!(c.admin.metrics_legacy_names, want, "{argv:?}");
    }
    // The flag alone does not take the next word as its value.
    assert!(Cli::try_parse_from(["serve", "--metrics-legacy-names", "true"]).is_err());
    let e = Cli::try_parse_from(["serve", "--metrics-legacy-names=yes"]).err();
    assert!(e.is_some_and(|e| e.to_string().contains("yes")));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idgen.toml");
    std::fs::write(&path, "[admin]\nmetrics_legacy_names = true\n").unwrap();
    let c = ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    }
    .resolve(NOW)
    .unwrap();
    assert!(c.admin.metrics_legacy_names);
}

fn with_global_region() -> ServeArgs {
    let mut a = ServeArgs::default();
    a.settings.layout.region_bits = Some(1);
    a.settings.lease.region = Some("global".into());
    a
}

#[test]
fn durations_are_written_to_read_back_exactly() {
    for (d, text) in [
        (Duration::ZERO, "0s"),
        (Duration::from_millis(10), "10ms"),
        (Duration::from_millis(1500), "1500ms"),
        (Duration::from_secs(300), "300s"),
        (Duration::from_secs(365 * 86_400), "365days"),
        (Duration::from_micros(1500), "1ms 500us"),
    ] {
        assert_eq!(format_duration(d), text);
        assert_eq!(parse_duration("x", text).unwrap(), d);
    }
}

/// `--help` shows every default from the sections' `Default`s; the settings without a fixed
/// default say so in words.
#[test]
fn help_shows_each_default_from_its_section() {
    let cmd = with_defaults_in_help(ServeArgs::augment_args(clap::Command::new("serve")));
    let mut missing = Vec::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if ["config", "check_config", "region"].contains(&id) {
            continue;
        }
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        if !help.contains("[default: ") {
            missing.push(id.to_string());
        }
    }
    assert!(missing.is_empty(), "no default in --help: {missing:?}");
    let help_of = |id: &str| {
        cmd.get_arguments()
            .find(|a| a.get_id() == id)
            .and_then(|a| a.get_help())
            .map(|h| h.to_string())
            .unwrap()
    };
    assert!(help_of("listen").ends_with("[default: 127.0.0.1:7420]"));
    assert!(help_of("http_listen").contains("[default: 127.0.0.1:7422]"));
    assert!(help_of("lease_ttl").ends_with("[default: 10s]"));
    assert!(help_of("range_warning").ends_with("[default: 365days]"));
    assert!(help_of("epoch").ends_with("[default: 2026-01-01T00:00:00Z]"));
    assert!(help_of("shards").contains("[default: number of CPUs]"));
    // Every setting lives in exactly one section's table.
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if !["config", "check_config"].contains(&id) {
            assert!(section_of(id).is_some(), "{id}");
        }
    }
}

#[test]
fn tls_settings_that_cannot_work_are_refused() {
    fn tls(f: impl FnOnce(&mut TlsArgs)) -> Result<ServeConfig, ConfigError> {
        let mut a = ServeArgs::default();
        f(&mut a.settings.tls);
        a.resolve(NOW)
    }
    let files = |t: &mut TlsArgs| {
        t.tls_cert = Some("/etc/idgen/tls.crt".into());
        t.tls_key = Some("/etc/idgen/tls.key".into());
    };
    let refused = [
        (
            tls(|t| t.tls_http = Some(true)).err(),
            "tls_http needs tls_cert and tls_key",
        ),
        (
            tls(|t| {
                files(t);
                t.tls_admin = Some("mtls".into());
            })
            .err(),
            "needs tls_client_ca",
        ),
        (
            tls(|t| {
                files(t);
                t.tls_admin = Some("https".into());
            })
            .err(),
            "is not one of off, tls, mtls",
        ),
        (
            tls(|t| {
                files(t);
                t.tls_admin = Some("tls".into());
                t.tls_client_ca = Some("/etc/idgen/ca.crt".into());
            })
            .err(),
            "no listener asks for client certificates",
        ),
        (tls(files).err(), "no listener uses TLS"),
        (
            tls(|t| {
                files(t);
                t.tls_listen = Some("127.0.0.1:7430".into());
                t.tls_reload_interval = Some("0s".into());
            })
            .err(),
            "must be more than 0",
        ),
    ];
    for (e, want) in refused {
        let e = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(want), "expected {want:?}, got {e:?}");
    }
    let c = tls(|t| {
        files(t);
        t.tls_listen = Some("127.0.0.1:7430".into());
        t.tls_client_ca = Some("/etc/idgen/ca.crt".into());
    })
    .unwrap();
    assert!(c.tls.mutual());
    assert_eq!(c.tls.listeners(), ["tls_listen"]);
    assert_eq!(c.tls.tls_admin, AdminTls::Off);
}
