//! TLS-only local masters and a TLS-only one-node Redis Cluster, with a CA
//! of the test's own made at runtime (`rcgen`): `tests/security.rs` and the
//! CLI's `--tls-ca` tests (`cli/tests/cli/tls.rs`) include it with
//! `#[path]`, under the `tls-rustls` feature.

#![allow(dead_code)]

use std::time::Duration;

use crate::support::local::{Extra, LocalNodes};

/// A CA and a server certificate for 127.0.0.1 and localhost signed by
/// it, written to `dir`; returns the CA's PEM and the server args.
pub fn certificates(dir: &std::path::Path) -> (Vec<u8>, Vec<String>) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
        .expect("self-signed CA");
    let key = KeyPair::generate().expect("server key");
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("server params")
        .signed_by(&key, &ca)
        .expect("server certificate");
    std::fs::create_dir_all(dir).expect("certificate dir");
    let write = |file: &str, text: String| {
        let path = dir.join(file);
        std::fs::write(&path, text).expect("write a certificate file");
        path.to_string_lossy().into_owned()
    };
    let args = vec![
        "--tls-cert-file".to_owned(),
        write("server.pem", cert.pem()),
        "--tls-key-file".to_owned(),
        write("server.key", key.serialize_pem()),
        "--tls-ca-cert-file".to_owned(),
        write("ca.pem", ca.pem()),
        "--tls-auth-clients".to_owned(),
        "no".to_owned(),
    ];
    (ca.pem().into_bytes(), args)
}

/// Certificates that trust `ca` (a PEM) and show no client certificate.
pub fn trusting(ca: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.to_vec()),
    }
}

/// `n` TLS-only masters with the certificates of `certificates`, written to
/// `dir`; returns them and the CA's PEM.
pub fn tls_masters(dir: &std::path::Path, n: usize) -> (LocalNodes, Vec<u8>) {
    let (ca, args) = certificates(dir);
    let nodes =
        LocalNodes::start_with(n, Extra { args, tls: true }).expect("start TLS-only masters");
    (nodes, ca)
}

/// A one-node Redis Cluster that serves every slot, over TLS only
/// (clients and cluster bus), with the certificates of `certificates`.
pub fn tls_cluster(dir: &std::path::Path) -> (LocalNodes, Vec<u8>) {
    let (ca, mut args) = certificates(dir);
    args.extend(["--cluster-enabled", "yes", "--tls-cluster", "yes"].map(str::to_owned));
    let nodes = LocalNodes::start_with(1, Extra { args, tls: true })
        .expect("start a TLS-only cluster node");
    let cli = |args: &[&str]| {
        let out = std::process::Command::new("redis-cli")
            // OpenSSL's checks of the test certificate are not under
            // test: only the library's (rustls) are.
            .args(["--tls", "--insecure"])
            .args(["-h", "127.0.0.1", "-p", &nodes.port(0).to_string()])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run redis-cli");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let added = cli(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    assert!(added.contains("OK"), "CLUSTER ADDSLOTSRANGE: {added}");
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while !cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") {
        assert!(std::time::Instant::now() < until, "no cluster_state:ok");
        std::thread::sleep(Duration::from_millis(50));
    }
    (nodes, ca)
}
