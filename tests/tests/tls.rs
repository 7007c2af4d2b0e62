//! TLS (`--tls-cert`/`--tls-key`, `https://` URLs, `--ca-file`): a CA made at test time (rcgen
//! on ring) signs the dispatcher's and a worker's certificates; the worker registers over
//! https, the Rust client reads a dataset over https, a client without the CA is refused with
//! a typed TLS error, a worker refused by the certificate says why in words, plain HTTP to a
//! TLS port and a stalled handshake are dropped, and bad files are usage errors.

use std::io::Read;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use serde_json::{Value, json};
use shardwise_core::dataset::DatasetDef;
use shardwise_gateway::client::{ClientError, DistributeOptions, distribute};
use shardwise_tests::{Dispatcher, TempDir, Worker, http, runtime};

/// A CA and certificates it signed for 127.0.0.1, as PEM files in a temp dir.
struct Pki {
    dir: TempDir,
}

impl Pki {
    fn new(name: &str) -> Pki {
        Pki::with_names(name, &["127.0.0.1", "localhost"])
    }

    /// The same, with certificates for `names` (their subjectAltNames) only.
    fn with_names(name: &str, names: &[&str]) -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let dir = TempDir::new(name);
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "shardwise test CA");
        let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
        std::fs::write(dir.0.join("ca.pem"), ca_cert.pem()).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        for who in ["dispatcher", "worker"] {
            let key = KeyPair::generate().expect("key");
            let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
            let params = CertificateParams::new(names).expect("params");
            let cert = params.signed_by(&key, &issuer).expect("certificate");
            std::fs::write(dir.0.join(format!("{who}.pem")), cert.pem()).unwrap();
            std::fs::write(dir.0.join(format!("{who}.key")), key.serialize_pem()).unwrap();
        }
        Pki { dir }
    }

    fn file(&self, name: &str) -> String {
        self.dir.0.join(name).to_string_lossy().into_owned()
    }
}

/// A dispatcher serving TLS (started as a replica is: its `/readyz` is not plain HTTP).
fn tls_dispatcher(pki: &Pki, extra: &[&str]) -> Dispatcher {
    let (cert, key) = (pki.file("dispatcher.pem"), pki.file("dispatcher.key"));
    let mut args = vec!["--tls-cert", &cert, "--tls-key", &key];
    args.extend_from_slice(extra);
    Dispatcher::start_replica(&args)
}

fn read_all(url: &str, options: DistributeOptions) -> Result<Vec<Value>, ClientError> {
    let ds = DatasetDef::from_json(&json!({"source": {"range": {"stop": 100}}})).unwrap();
    runtime().block_on(async {
        let read = distribute(url, ds, options).try_collect::<Vec<Value>>();
        tokio::time::timeout(Duration::from_secs(60), read).await.expect("the epoch ends in time")
    })
}

fn options() -> DistributeOptions {
    DistributeOptions {
        unknown_task_timeout: Duration::from_secs(20),
        unavailable_timeout: Duration::from_secs(20),
        ..shardwise_tests::fast_options()
    }
}

#[test]
fn a_tls_cluster_registers_and_serves_a_dataset_over_https() {
    let pki = Pki::new("tls-cluster");
    let d = tls_dispatcher(&pki, &[]);
    assert!(d.url.starts_with("https://127.0.0.1:"), "the listening line says https: {}", d.url);
    let (ca, cert, key) = (pki.file("ca.pem"), pki.file("worker.pem"), pki.file("worker.key"));
    // The worker prints its listening line once it registered: over https, trusting the CA.
    let w = Worker::start(
        &d.url,
        &[
            "--ca-file",
            &ca,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--heartbeat-interval",
            "200ms",
        ],
    );
    assert!(w.url.starts_with("https://127.0.0.1:"), "{}", w.url);
    let got = read_all(&d.url, DistributeOptions { ca_file: Some(ca.into()), ..options() })
        .expect("a read over https");
    let mut got: Vec<i64> = got.iter().map(|v| v.as_i64().unwrap()).collect();
    got.sort_unstable();
    assert_eq!(got, (0..100).collect::<Vec<i64>>());
}

#[test]
fn a_client_without_the_ca_is_refused_with_a_typed_tls_error() {
    let pki = Pki::new("tls-no-ca");
    let d = tls_dispatcher(&pki, &[]);
    let started = Instant::now();
    let e = read_all(&d.url, options()).unwrap_err();
    match &e {
        ClientError::Tls { detail, .. } => {
            assert!(detail.contains("UnknownIssuer"), "names the TLS failure: {e}");
        }
        other => panic!("expected a TLS error, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(15), "not retried until the timeout");
    // A worker without the CA is refused too: it exits 1 naming the failure.
    let e = Worker::try_start(&d.url, &[]).unwrap_err();
    assert!(e.starts_with("exited with Some(1)"), "{e}");
    assert!(e.contains("TLS handshake failed"), "{e}");
}

/// A worker that cannot trust the dispatcher's certificate exits saying what is wrong with it
/// in words and what to do: a certificate for another name than the one it connects to, and a
/// certificate signed by a CA it was not given.
#[test]
fn a_worker_refused_by_the_certificate_says_why_and_what_to_do() {
    let pki = Pki::with_names("tls-wrong-name", &["localhost"]);
    let d = tls_dispatcher(&pki, &[]);
    assert!(d.url.starts_with("https://127.0.0.1:"), "{}", d.url);
    let ca = pki.file("ca.pem");
    let e = Worker::try_start(&d.url, &["--ca-file", &ca]).unwrap_err();
    assert!(e.starts_with("exited with Some(1)"), "{e}");
    assert!(
        e.contains(
            "the server's certificate is not valid for 127.0.0.1: its names are [localhost]; \
             issue it with subjectAltName IP:127.0.0.1"
        ),
        "{e}"
    );
    let e = Worker::try_start(&d.url, &[]).unwrap_err();
    assert!(e.starts_with("exited with Some(1)"), "{e}");
    assert!(
        e.contains(
            "the server's certificate is signed by an unknown authority (or is self-signed): \
             pass --ca-file with the CA that signed it"
        ),
        "{e}"
    );
}

#[test]
fn plain_http_to_a_tls_port_fails_cleanly_and_a_stalled_handshake_is_dropped() {
    let pki = Pki::new("tls-plain");
    let d = tls_dispatcher(&pki, &["--read-timeout", "500ms"]);
    let plain = d.url.replacen("https://", "http://", 1);
    match http("GET", &plain, "/healthz", None) {
        Err(_) => {}
        Ok(r) => assert_ne!(r.status, 200, "plain HTTP is not served on a TLS port"),
    }
    let addr = d.url.trim_start_matches("https://").to_owned();
    // Nothing sent, and half a ClientHello: both closed after --read-timeout.
    for sent in [&b""[..], &[0x16, 0x03, 0x01, 0x00, 0xff, 0x01][..]] {
        let mut tcp =
            shardwise_tests::rawhttp::send_bytes(&addr, sent, Duration::from_secs(10)).unwrap();
        let started = Instant::now();
        let mut buf = [0u8; 64];
        let closed = match tcp.read(&mut buf) {
            Ok(n) => n == 0,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        };
        assert!(closed, "the server closes a stalled handshake ({} bytes sent)", sent.len());
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }
    // The server still serves TLS clients.
    let ca = pki.file("ca.pem");
    let (ca2, cert, key) = (ca.clone(), pki.file("worker.pem"), pki.file("worker.key"));
    let _w = Worker::start(&d.url, &["--ca-file", &ca2, "--tls-cert", &cert, "--tls-key", &key]);
}

#[test]
fn unusable_tls_files_are_usage_errors_naming_the_file() {
    let pki = Pki::new("tls-bad");
    let missing = pki.file("missing.pem");
    let key = pki.file("dispatcher.key");
    let e = Dispatcher::try_start(&["--tls-cert", &missing, "--tls-key", &key]).unwrap_err();
    assert!(e.starts_with("exited with Some(2)"), "{e}");
    assert!(e.contains(&format!("--tls-cert {missing}: cannot read it")), "{e}");
    // A key that is not the certificate's.
    let (cert, other) = (pki.file("dispatcher.pem"), pki.file("worker.key"));
    let e = Dispatcher::try_start(&["--tls-cert", &cert, "--tls-key", &other]).unwrap_err();
    assert!(e.starts_with("exited with Some(2)"), "{e}");
    assert!(e.contains(&format!("--tls-key {other}")), "{e}");
    // A certificate without its key.
    let e = Dispatcher::try_start(&["--tls-cert", &cert]).unwrap_err();
    assert!(e.starts_with("exited with Some(2)"), "{e}");
    // The worker's CA file.
    let d = Dispatcher::start(&[]);
    let e = Worker::try_start(&d.url, &["--ca-file", &key]).unwrap_err();
    assert!(e.starts_with("exited with Some(2)"), "{e}");
    assert!(e.contains(&format!("--ca-file {key}: no certificate in it")), "{e}");
}

/// Runs `shardwise ARGS` expecting it to refuse to start: bounded in time (killed after 10 s)
/// and in memory (1 GiB of address space), so that a file read until out of memory or a start
/// that blocks for ever fails this test instead of stalling it or the machine.
fn refused_start(args: &[&str]) -> shardwise_tests::Run {
    let bin = shardwise_tests::shardwise_bin();
    let mut cmd = std::process::Command::new("prlimit");
    cmd.arg(format!("--as={}", 1u64 << 30)).arg("--").arg(bin).args(args);
    shardwise_tests::Process::spawn(&mut cmd)
        .finish(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("shardwise {args:?} did not exit: {e}"))
}

/// A certificate or key "file" that never ends (`/dev/zero`), blocks (a FIFO no one writes)
/// or is far larger than any PEM file is refused at once, naming the file: exit 2, as for any
/// other unusable file (it used to be read until out of memory, or to block the start forever).
#[test]
fn endless_blocking_or_huge_tls_files_are_usage_errors_naming_the_file() {
    let pki = Pki::new("tls-hostile");
    let (cert, key) = (pki.file("dispatcher.pem"), pki.file("dispatcher.key"));
    let fifo = pki.file("fifo.pem");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
    assert!(made.success(), "mkfifo {fifo}");
    let huge = pki.file("huge.pem");
    // A valid certificate, then padding past the bound (4 MiB).
    let mut bytes = std::fs::read(&cert).unwrap();
    bytes.resize(5 << 20, b'\n');
    std::fs::write(&huge, bytes).unwrap();
    let cases = [
        ("--tls-cert", "/dev/zero", "not a regular file (a character device)"),
        ("--tls-key", "/dev/zero", "not a regular file (a character device)"),
        ("--tls-cert", fifo.as_str(), "not a regular file (a FIFO)"),
        ("--tls-key", fifo.as_str(), "not a regular file (a FIFO)"),
        ("--tls-cert", huge.as_str(), "larger than 4 MiB"),
        ("--tls-key", pki.dir.path(), "not a regular file (a directory)"),
    ];
    for (flag, file, why) in cases {
        let args = if flag == "--tls-cert" {
            ["--tls-cert", file, "--tls-key", key.as_str()]
        } else {
            ["--tls-cert", cert.as_str(), "--tls-key", file]
        };
        let started = Instant::now();
        let run = refused_start(&[&["dispatcher", "--port", "0"], &args[..]].concat());
        let e = format!("{}{}", run.stdout, run.stderr);
        assert_eq!(run.code, 2, "{flag} {file}: {e}");
        assert!(e.contains(&format!("{flag} {file}: {why}")), "{flag} {file}: {e}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{flag} {file}: {:?}",
            started.elapsed()
        );
    }
    // The worker's CA file goes through the same checks.
    let d = Dispatcher::start(&[]);
    let run =
        refused_start(&["worker", "--port", "0", "--dispatcher", &d.url, "--ca-file", "/dev/zero"]);
    let e = format!("{}{}", run.stdout, run.stderr);
    assert_eq!(run.code, 2, "{e}");
    assert!(e.contains("--ca-file /dev/zero: not a regular file"), "{e}");
}

/// TensorFlow's gRPC protocol over TLS: a tonic client trusting the CA (ALPN `h2`) reaches the
/// dispatcher's `DispatcherService` on its one port.
#[tokio::test]
async fn grpc_over_tls_reaches_the_dispatcher() {
    use shardwise_gateway::tf::proto::tensorflow::data as tf;
    use tf::dispatcher_service_client::DispatcherServiceClient;
    let pki = Pki::new("tls-grpc");
    let d = tls_dispatcher(&pki, &[]);
    let ca = std::fs::read_to_string(pki.file("ca.pem")).unwrap();
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca))
        .domain_name("localhost");
    let channel = tonic::transport::Endpoint::from_shared(d.url.clone())
        .expect("a URL")
        .tls_config(tls)
        .expect("a TLS config")
        .connect()
        .await
        .expect("connected over TLS");
    let mut c = DispatcherServiceClient::new(channel);
    let version = c.get_version(tf::GetVersionRequest {}).await.expect("an answer").into_inner();
    assert_eq!(version.version, 9);
    // REST on the same port over TLS, through the Rust client's stack, still works alongside.
    let rest = shardwise_gateway::http::client::Rest::new(
        shardwise_gateway::http::client::http_client_with(
            Duration::from_secs(5),
            shardwise_gateway::http::tls::client_config(Some(pki.file("ca.pem").as_ref())).unwrap(),
        ),
        d.url.clone(),
        None,
    );
    let v: Value = rest.get("/v1/version", &[]).await.expect("REST over https");
    assert!(v.get("version").is_some(), "{v}");
}
