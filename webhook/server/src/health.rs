//! Liveness and readiness state shared by both ports.

use std::sync::atomic::{AtomicBool, Ordering};

use kube_prestop_cluster::cluster_cache::ClusterCache;

/// Readiness: the cluster cache has synced and the server is not draining.
/// Liveness: the process answers at all.
#[derive(Debug)]
pub struct Health {
    draining: AtomicBool,
    cache: ClusterCache,
}

impl Health {
    /// Healthy, not draining; readiness follows `cache`'s sync state.
    pub fn new(cache: ClusterCache) -> Self {
        Self {
            draining: AtomicBool::new(false),
            cache,
        }
    }

    /// Fail readiness from now on (shutdown has begun).
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Whether shutdown has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Whether the server should receive traffic.
    pub fn is_ready(&self) -> bool {
        !self.is_draining() && self.cache.is_synced()
    }
}
