//! TLS for the servers and the clients, on the one crypto stack of the tree: rustls with ring
//! (kube brings it; no aws-lc, no OpenSSL).
//!
//! * **Servers** (`--tls-cert FILE --tls-key FILE` on `shardwise dispatcher` and `shardwise
//!   worker`): [`server_config`] loads a PEM certificate chain (the server's certificate
//!   first, then its intermediates) and a PEM private key (PKCS#8, PKCS#1 or SEC1), checks
//!   that they belong together, and offers ALPN `h2` and `http/1.1`. The port then speaks TLS
//!   only; [`conn`](super::conn) bounds the handshake by `--read-timeout`.
//! * **Clients** (the worker's calls to the dispatcher, the Rust client's calls to dispatchers
//!   and workers): [`client_config`], from `shardwise-client` (re-exported here with the rest
//!   of its `tls` module), trusts the system's roots and, besides them, the certificates of a
//!   CA file (`--ca-file`, `DistributeOptions::ca_file`).
//!
//! Every unusable file is a [`TlsFileError`] naming the file and what is wrong with it (the
//! process exits 2, as for any bad argument).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject as _;

pub use shardwise_client::tls::*;

/// A server's TLS settings from its certificate chain and private key (PEM files): ALPN `h2`
/// and `http/1.1`, TLS 1.2 and 1.3.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsFileError> {
    let chain = certificates("--tls-cert", cert)?;
    let key_pem = read_file("--tls-key", key)?;
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        TlsFileError::new(
            "--tls-key",
            key,
            format!("no usable private key in it (PEM PKCS#8, PKCS#1 or SEC1): {e}"),
        )
    })?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsFileError::new("--tls-cert", cert, e.to_string()))?
        .with_no_client_auth();
    let mut config = builder.with_single_cert(chain, private).map_err(|e| {
        TlsFileError::new(
            "--tls-key",
            key,
            format!("cannot be used with the certificate of {}: {e}", cert.display()),
        )
    })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_files_name_the_file_and_the_flag() {
        let dir = std::env::temp_dir().join(format!("shardwise-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let e = server_config(&missing, &missing).unwrap_err();
        assert_eq!(e.flag, "--tls-cert");
        assert!(e.to_string().contains("missing.pem: cannot read it"), "{e}");
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not pem\n").unwrap();
        let e = server_config(&junk, &junk).unwrap_err();
        assert!(e.to_string().starts_with("--tls-cert "), "{e}");
        assert!(e.to_string().contains("no certificate in it"), "{e}");
        let e = client_config(Some(&junk)).unwrap_err();
        assert!(e.to_string().starts_with("--ca-file "), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
