//! A rustls certificate resolver whose certificate can be swapped while the
//! server runs, and the task that reloads it from disk.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::load::{LoadedCert, TlsLoadError, load_certified_key, read_pair};

/// What a reload attempt that found changed files did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadEvent {
    /// A new certificate is served.
    Reloaded {
        /// Its `notAfter`, Unix seconds.
        not_after_unix: i64,
    },
    /// The files could not be read or used; the old certificate is kept.
    Failed,
}

/// Serves the current certificate to every handshake; [`Self::reload`]
/// replaces it when the files changed.
#[derive(Debug)]
pub struct ReloadingCertResolver {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<LoadedCert>,
}

impl ReloadingCertResolver {
    /// Load the pair once; fails when the files are missing or invalid.
    pub fn new(cert_path: PathBuf, key_path: PathBuf) -> Result<Self, TlsLoadError> {
        let loaded = load_certified_key(&cert_path, &key_path)?;
        Ok(Self {
            cert_path,
            key_path,
            current: RwLock::new(loaded),
        })
    }

    /// `notAfter` of the certificate being served, Unix seconds.
    pub fn not_after_unix(&self) -> i64 {
        match self.current.read() {
            Ok(c) => c.not_after_unix,
            Err(poisoned) => poisoned.into_inner().not_after_unix,
        }
    }

    fn fingerprint_matches(&self, bytes: &[u8]) -> bool {
        match self.current.read() {
            Ok(c) => c.fingerprint == bytes,
            Err(poisoned) => poisoned.into_inner().fingerprint == bytes,
        }
    }

    /// Re-read the files; when their content differs from what is served,
    /// load and swap in the new pair.
    ///
    /// Returns `Ok(true)` when a new certificate is now served, `Ok(false)`
    /// when nothing changed. On error the old certificate stays in use.
    pub fn reload(&self) -> Result<bool, TlsLoadError> {
        let bytes = read_pair(&self.cert_path, &self.key_path)?;
        if self.fingerprint_matches(&bytes) {
            return Ok(false);
        }
        let loaded = load_certified_key(&self.cert_path, &self.key_path)?;
        match self.current.write() {
            Ok(mut c) => *c = loaded,
            Err(poisoned) => *poisoned.into_inner() = loaded,
        }
        Ok(true)
    }

    /// Poll the files every `interval` until the task is dropped, calling
    /// `on_event` after each swap and each failed reload. A failed reload is
    /// logged and retried at the next tick (a Secret update may be observed
    /// half-written); the old certificate stays in use.
    pub async fn watch(self: Arc<Self>, interval: Duration, on_event: impl Fn(ReloadEvent) + Send) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        let mut last_error: Option<String> = None;
        loop {
            ticker.tick().await;
            match self.reload() {
                Ok(true) => {
                    last_error = None;
                    let not_after = self.not_after_unix();
                    tracing::info!(
                        cert = %self.cert_path.display(),
                        not_after_unix = not_after,
                        "serving certificate reloaded"
                    );
                    on_event(ReloadEvent::Reloaded {
                        not_after_unix: not_after,
                    });
                }
                Ok(false) => last_error = None,
                Err(e) => {
                    on_event(ReloadEvent::Failed);
                    let msg = e.to_string();
                    if last_error.as_deref() != Some(msg.as_str()) {
                        tracing::error!(error = %msg, "certificate reload failed; keeping the old certificate");
                    }
                    last_error = Some(msg);
                }
            }
        }
    }
}

impl ResolvesServerCert for ReloadingCertResolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(match self.current.read() {
            Ok(c) => c.certified_key.clone(),
            Err(poisoned) => poisoned.into_inner().certified_key.clone(),
        })
    }
}
