//! TLS for the clients, on the one crypto stack of the tree: rustls with ring (no aws-lc, no
//! OpenSSL).
//!
//! The worker's calls to the dispatcher and the Rust client's calls to dispatchers and workers
//! use [`client_config`]: it trusts the system's roots (the platform's store, as
//! `rustls-native-certs` finds it) **and**, besides them, the certificates of a CA file
//! (`--ca-file`, `DistributeOptions::ca_file`): a private CA works without installing it
//! system-wide, and public certificates keep working. A server whose certificate chains to
//! neither is refused ([`CallError::Tls`](crate::rest::CallError::Tls)).
//!
//! The servers' settings (`--tls-cert`, `--tls-key`) are the gateway's; they read their PEM
//! files with [`read_file`] and [`certificates`] and use [`provider`] as the clients do. Every
//! unusable file is a [`TlsFileError`] naming the file and what is wrong with it (the process
//! exits 2, as for any bad argument).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// A certificate, key or CA file that cannot be used: which file, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {}: {reason}", path.display())]
pub struct TlsFileError {
    /// The option that named it (`--tls-cert`, `--tls-key`, `--ca-file`).
    pub flag: &'static str,
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub reason: String,
}

impl TlsFileError {
    /// `flag`'s file `path` refused for `reason`.
    pub fn new(flag: &'static str, path: &Path, reason: impl Into<String>) -> TlsFileError {
        TlsFileError { flag, path: path.to_owned(), reason: reason.into() }
    }
}

/// The ring provider, the only one this build uses; also installed as the process's default
/// (what a rustls user that picks none gets, e.g. reqwest's own builder).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let ring = Arc::new(rustls::crypto::ring::default_provider());
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may have installed it meanwhile: the same provider, nothing lost.
        let _ = rustls::crypto::CryptoProvider::install_default(ring.as_ref().clone());
    }
    ring
}

/// Installs ring as the process's default provider (if none is): reqwest built without a
/// preconfigured config looks for it, and panics without one.
pub(crate) fn ensure_provider() {
    let _ = provider();
}

/// A client's TLS settings trusting the system's roots only: [`client_config`] without a CA
/// file, which reads nothing and so cannot fail.
pub fn system_client_config() -> rustls::ClientConfig {
    client_config(None).unwrap_or_else(|_| {
        let mut roots = rustls::RootCertStore::empty();
        let _ = roots.add_parsable_certificates(system_roots().iter().cloned());
        let _ = provider();
        rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth()
    })
}

/// The largest certificate, key or CA file read (a chain or a CA bundle is kilobytes; the
/// system's whole bundle is under 1 MiB).
pub const MAX_TLS_FILE_BYTES: u64 = 4 << 20;

/// The bytes of a certificate, key or CA file: a regular file (not a FIFO, which would block
/// the start forever, nor a device such as `/dev/zero`, which never ends) of at most
/// [`MAX_TLS_FILE_BYTES`]. `flag` is the option that named it, for the error.
pub fn read_file(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsFileError> {
    use std::io::Read as _;
    let fail = |reason: String| TlsFileError::new(flag, path, reason);
    let regular = |meta: &std::fs::Metadata| {
        if !meta.is_file() {
            return Err(fail(format!(
                "not a regular file (a {}); name the PEM file itself",
                file_kind(meta)
            )));
        }
        if meta.len() > MAX_TLS_FILE_BYTES {
            return Err(too_large(flag, path));
        }
        Ok(())
    };
    // Checked before opening (opening a FIFO waits for a writer), and again on what was opened.
    let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    regular(&meta)?;
    let file = std::fs::File::open(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    regular(&file.metadata().map_err(|e| fail(format!("cannot read it: {e}")))?)?;
    let mut bytes = Vec::new();
    file.take(MAX_TLS_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(format!("cannot read it: {e}")))?;
    if bytes.len() as u64 > MAX_TLS_FILE_BYTES {
        // It grew while it was read.
        return Err(too_large(flag, path));
    }
    Ok(bytes)
}

fn too_large(flag: &'static str, path: &Path) -> TlsFileError {
    TlsFileError::new(
        flag,
        path,
        format!("larger than {} MiB: not a PEM certificate or key file", MAX_TLS_FILE_BYTES >> 20),
    )
}

/// What a file that is not a regular file is, for the refusal.
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    let t = meta.file_type();
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// The certificates of a PEM file (at least one), read with [`read_file`].
pub fn certificates(
    flag: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let pem = read_file(flag, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsFileError::new(flag, path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(TlsFileError::new(
            flag,
            path,
            "no certificate in it (a PEM file with -----BEGIN CERTIFICATE----- blocks)",
        ));
    }
    Ok(certs)
}

/// The system's roots, loaded once per process (certificates it cannot parse are skipped).
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::debug!(error = %e, "a system root certificate could not be loaded");
        }
        found.certs
    })
}

/// A client's TLS settings: the system's roots and, besides, every certificate of `ca_file`
/// (PEM); ALPN `http/1.1` (the REST client speaks HTTP/1.1).
pub fn client_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, TlsFileError> {
    let mut roots = rustls::RootCertStore::empty();
    let _ = roots.add_parsable_certificates(system_roots().iter().cloned());
    if let Some(path) = ca_file {
        for cert in certificates("--ca-file", path)? {
            roots.add(cert).map_err(|e| {
                TlsFileError::new("--ca-file", path, format!("not a usable CA certificate: {e}"))
            })?;
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| {
            TlsFileError::new("--ca-file", ca_file.unwrap_or(Path::new("")), e.to_string())
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The TLS failure among an error's sources, if any (rustls' own error, as hyper and reqwest
/// wrap it in I/O errors), in words (see [`describe`]): a refused certificate, a peer that
/// does not speak TLS, ...
pub fn tls_failure(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(t) = e.downcast_ref::<rustls::Error>() {
            return Some(describe(t));
        }
        // An I/O error's `source` skips the error it wraps: go inside instead.
        next = match e.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// A TLS failure in words: what is wrong with the server's certificate and what to do about
/// it, then rustls' own reason in parentheses. Failures that are not about the certificate
/// are rustls' reason alone.
pub fn describe(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    let rustls::Error::InvalidCertificate(c) = e else { return e.to_string() };
    let words = match c {
        C::NotValidForNameContext { expected, presented } => {
            let name = expected.to_str();
            let san = match expected {
                rustls::pki_types::ServerName::IpAddress(_) => format!("IP:{name}"),
                _ => format!("DNS:{name}"),
            };
            let names: Vec<&str> = presented.iter().map(|n| plain_name(n)).collect();
            format!(
                "the server's certificate is not valid for {name}: its names are [{}]; issue it \
                 with subjectAltName {san}, or connect with one of its names",
                names.join(", ")
            )
        }
        C::NotValidForName => "the server's certificate is not valid for the host in the URL: \
                               issue it with a subjectAltName for that host (IP:... for an \
                               address, DNS:... for a name)"
            .to_owned(),
        C::UnknownIssuer => "the server's certificate is signed by an unknown authority (or is \
                             self-signed): pass --ca-file with the CA that signed it (for a \
                             self-signed certificate, the certificate itself)"
            .to_owned(),
        C::ExpiredContext { not_after, .. } => format!(
            "the server's certificate expired on {}: issue it a new one",
            utc(not_after.as_secs())
        ),
        C::Expired => "the server's certificate has expired: issue it a new one".to_owned(),
        C::NotValidYetContext { not_before, .. } => format!(
            "the server's certificate is not valid before {}: check this machine's clock (and \
             the issuer's)",
            utc(not_before.as_secs())
        ),
        C::NotValidYet => "the server's certificate is not valid yet: check this machine's \
                           clock (and the issuer's)"
            .to_owned(),
        C::Revoked => "the server's certificate was revoked: issue it a new one".to_owned(),
        C::BadSignature => "the server's certificate chain has a bad signature: a certificate \
                            was not signed by the key of the CA it names"
            .to_owned(),
        _ => return e.to_string(),
    };
    format!("{words} ({e})")
}

/// A subject name as rustls reports it (`DnsName("localhost")`, `IpAddress(127.0.0.1)`), as
/// a name.
fn plain_name(presented: &str) -> &str {
    presented
        .strip_prefix("DnsName(\"")
        .and_then(|n| n.strip_suffix("\")"))
        .or_else(|| presented.strip_prefix("IpAddress(").and_then(|n| n.strip_suffix(')')))
        .unwrap_or(presented)
}

/// Seconds since the Unix epoch as a UTC date and time, `2030-01-31 23:59:59 UTC`.
fn utc(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days to a civil date: years of 400 (146 097 days) from 0000-03-01, March first, so the
    // leap day ends a year.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_ca_files_name_the_file_and_the_flag() {
        let dir = std::env::temp_dir().join(format!("shardwise-client-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let e = client_config(Some(&missing)).unwrap_err();
        assert_eq!(e.flag, "--ca-file");
        assert!(e.to_string().contains("missing.pem: cannot read it"), "{e}");
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not pem\n").unwrap();
        let e = client_config(Some(&junk)).unwrap_err();
        assert!(e.to_string().starts_with("--ca-file "), "{e}");
        assert!(e.to_string().contains("no certificate in it"), "{e}");
        let e = certificates("--tls-cert", &dir).unwrap_err();
        assert!(e.to_string().contains("not a regular file (a directory)"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_709_251_199), "2024-02-29 23:59:59 UTC");
        assert_eq!(utc(4_102_444_800), "2100-01-01 00:00:00 UTC");
    }

    #[test]
    fn certificate_failures_say_what_is_wrong_and_what_to_do() {
        use rustls::CertificateError as C;
        use rustls::pki_types::{ServerName, UnixTime};
        let cert = |c: C| describe(&rustls::Error::InvalidCertificate(c));
        let e = cert(C::NotValidForNameContext {
            expected: ServerName::try_from("127.0.0.1").unwrap(),
            presented: vec!["DnsName(\"localhost\")".into(), "IpAddress(10.0.0.1)".into()],
        });
        assert!(
            e.starts_with(
                "the server's certificate is not valid for 127.0.0.1: its names are [localhost, \
                 10.0.0.1]; issue it with subjectAltName IP:127.0.0.1"
            ),
            "{e}"
        );
        let e = cert(C::NotValidForNameContext {
            expected: ServerName::try_from("dispatcher.example").unwrap(),
            presented: vec![],
        });
        assert!(
            e.contains("its names are []; issue it with subjectAltName DNS:dispatcher.example")
        );
        let e = cert(C::UnknownIssuer);
        assert!(e.contains("unknown authority") && e.contains("pass --ca-file"), "{e}");
        let e = cert(C::ExpiredContext {
            time: UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_800_000_000)),
            not_after: UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_709_251_199)),
        });
        assert!(
            e.starts_with("the server's certificate expired on 2024-02-29 23:59:59 UTC"),
            "{e}"
        );
        let e = cert(C::NotValidYetContext {
            time: UnixTime::since_unix_epoch(std::time::Duration::from_secs(0)),
            not_before: UnixTime::since_unix_epoch(std::time::Duration::from_secs(951_782_400)),
        });
        assert!(e.contains("not valid before 2000-02-29 00:00:00 UTC"), "{e}");
        // Not a certificate failure: rustls' reason as it is.
        let other = rustls::Error::General("x".into());
        assert_eq!(describe(&other), other.to_string());
    }
}
