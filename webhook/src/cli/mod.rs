//! Command line of `kube-prestop-webhook`: `serve` (the admission server),
//! `inject` (offline injection), sharing the engine and logging flags,
//! `check` (an installation, from the operator's side) and `outcomes` (the
//! optional hook-outcome exporter).

mod cert_flags;
mod check_args;
mod choices;
mod duration;
mod engine_flags;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

pub use cert_flags::CertArgs;
pub use check_args::CheckArgs;
pub use choices::{
    FailureModeFlag, LogFormatFlag, OutputFormatFlag, SidecarBinarySourceFlag, WorkloadKindFlag,
};
pub use duration::{
    parse_duration, parse_idle_timeout, parse_max_connections, parse_read_timeout,
    parse_write_timeout,
};
pub use engine_flags::EngineArgs;

use kube_prestop_server::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_INFLIGHT_BODY_BYTES, DEFAULT_MAX_INFLIGHT_PARSED_BYTES,
};

/// Mutating admission webhook that makes a Job container's preStop command
/// run when the container exits on its own.
#[derive(Debug, Parser)]
#[command(name = "kube-prestop-webhook", version, about)]
pub struct Cli {
    /// Logging flags.
    #[command(flatten)]
    pub log: LogArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the admission server (HTTPS `/mutate`, plain-HTTP `/metrics`).
    Serve(Box<ServeArgs>),
    /// Inject Pods, Jobs and CronJobs from a manifest file offline and print
    /// the result (like `istioctl kube-inject`).
    Inject(Box<InjectArgs>),
    /// Check an installation on a cluster: the webhook configuration, its
    /// replicas as the API server reaches them, their certificate against
    /// the caBundle, a dry-run pod in every labelled namespace (and, with
    /// --run-job, a test Job's preStop). Exit status 1 if anything failed.
    Check(Box<CheckArgs>),
    /// Export the hook outcomes of injected pods as Prometheus counters:
    /// watch the pods labelled `kube-prestop.io/injected=true` cluster-wide,
    /// read their sidecars' termination messages, count each run once
    /// (plain-HTTP `/metrics`, `/livez`, `/readyz`). Needs list and watch on
    /// pods.
    Outcomes(Box<OutcomesArgs>),
}

/// Logging flags, for both subcommands.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormatFlag::Text, env = "KUBE_PRESTOP_LOG_FORMAT", global = true)]
    pub log_format: LogFormatFlag,
    /// Log level or filter in RUST_LOG syntax (e.g. `info`, `debug`,
    /// `kube_prestop_webhook=debug,info`).
    #[arg(long, default_value = "info", env = "RUST_LOG", global = true)]
    pub log_level: String,
}

/// Flags of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Engine configuration.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Self-managed serving certificate (the chart's default mode).
    #[command(flatten)]
    pub certs: CertArgs,
    /// HTTPS listen address for `/mutate`, `/livez`, `/readyz`.
    #[arg(long, default_value = "0.0.0.0:8443", env = "KUBE_PRESTOP_LISTEN_ADDR")]
    pub listen_addr: SocketAddr,
    /// Plain-HTTP listen address for `/metrics`, `/livez`, `/readyz`.
    #[arg(
        long,
        default_value = "0.0.0.0:9090",
        env = "KUBE_PRESTOP_METRICS_ADDR"
    )]
    pub metrics_addr: SocketAddr,
    /// PEM certificate chain of the serving certificate (leaf first);
    /// reloaded when it changes on disk.
    #[arg(long, env = "KUBE_PRESTOP_TLS_CERT_FILE")]
    pub tls_cert_file: PathBuf,
    /// PEM private key of the serving certificate; reloaded with it.
    #[arg(long, env = "KUBE_PRESTOP_TLS_KEY_FILE")]
    pub tls_key_file: PathBuf,
    /// PEM CA certificate(s) that a `/mutate` client's certificate must
    /// chain to: the CA of the client certificate the API server presents
    /// to webhooks per its AdmissionConfiguration (kubeConfigFile). Set, a
    /// review from a client without such a certificate is refused (401); a
    /// certificate that does not verify fails the TLS handshake. Unset
    /// (default): no client certificate asked for. Read at start.
    #[arg(long, env = "KUBE_PRESTOP_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// How often the certificate files are checked for changes.
    #[arg(long, default_value = "5s", value_parser = parse_duration, env = "KUBE_PRESTOP_CERT_RELOAD_INTERVAL")]
    pub cert_reload_interval: Duration,
    /// On SIGTERM: time readiness fails before the listener closes, so the
    /// endpoint is removed first; meanwhile HTTP/1.1 answers carry
    /// `Connection: close`, so clients drop their pooled connections.
    #[arg(long, default_value = "5s", value_parser = parse_duration, env = "KUBE_PRESTOP_DRAIN_DELAY")]
    pub drain_delay: Duration,
    /// On SIGTERM: longest wait for in-flight requests after the listener
    /// closes.
    #[arg(long, default_value = "20s", value_parser = parse_duration, env = "KUBE_PRESTOP_SHUTDOWN_GRACE")]
    pub shutdown_grace: Duration,
    /// What to do with a pod the engine cannot handle: `allow` admits it
    /// without injection, with a warning and the kube-prestop.io/skipped
    /// annotation saying why; `deny` refuses it (fail closed).
    #[arg(long, value_enum, default_value_t = FailureModeFlag::Allow, env = "KUBE_PRESTOP_FAILURE_MODE")]
    pub failure_mode: FailureModeFlag,
    /// Largest `/mutate` request body in bytes (larger: HTTP 413). Default
    /// 4 MiB: the pod of the API server's largest request (3 MiB) with its
    /// defaults, plus the review's envelope.
    #[arg(long, default_value_t = DEFAULT_MAX_BODY_BYTES, env = "KUBE_PRESTOP_MAX_BODY_BYTES")]
    pub max_body_bytes: usize,
    /// Request body bytes held at once across `/mutate` requests, charged as
    /// the bytes arrive; a request whose next bytes do not fit is shed (HTTP
    /// 503, counted as `reason="overloaded"`). Bodies past 64 KiB may not
    /// take the last quarter, which stays for ordinary reviews. Default
    /// 16 MiB.
    #[arg(long, default_value_t = DEFAULT_MAX_INFLIGHT_BODY_BYTES, env = "KUBE_PRESTOP_MAX_INFLIGHT_BODY_BYTES")]
    pub max_inflight_body_bytes: usize,
    /// Estimated memory of the reviews being parsed at once, bytes: each
    /// review's cost is estimated from its JSON before it is parsed (a
    /// pod's typed structs take up to about 200 times its JSON) and held
    /// until it is answered; a review that does not fit is shed (HTTP 503,
    /// `reason="overloaded"`), and a pod estimated over half of it is not
    /// parsed (`reason="pod_too_large"`; `--failure-mode` decides). Default
    /// 64 MiB, which keeps the webhook under the chart's 128 MiB limit.
    #[arg(long, default_value_t = DEFAULT_MAX_INFLIGHT_PARSED_BYTES, env = "KUBE_PRESTOP_MAX_INFLIGHT_PARSED_BYTES")]
    pub max_inflight_parsed_bytes: usize,
    /// Connections served at once, shared by peer address: when all are
    /// held, a client from an address holding fewer than the one holding
    /// the most may get the slot of that address's connection whose
    /// request has stalled arriving (over 1 s), else its longest-idle one.
    /// At least 1.
    #[arg(long, default_value_t = 1024, value_parser = parse_max_connections, env = "KUBE_PRESTOP_MAX_CONNECTIONS")]
    pub max_connections: usize,
    /// Time allowed for a client to send request headers (HTTP/1.1, also
    /// the longest wait for the next request on a keep-alive connection), its
    /// first request (HTTP/1.1 and HTTP/2: a client that sends no request
    /// after the TLS handshake is disconnected) and, separately, the TLS
    /// handshake and the request body. More than 0.
    #[arg(long, default_value = "10s", value_parser = parse_read_timeout, env = "KUBE_PRESTOP_READ_TIMEOUT")]
    pub read_timeout: Duration,
    /// A connection with no request in flight for this long is closed
    /// (HTTP/2: `GOAWAY`; HTTP/1.1 after its last response). Default 120 s,
    /// longer than the 90 s idle time of the API server's own connection
    /// pool, so that the API server closes an idle connection first. More
    /// than 0.
    #[arg(long, default_value = "120s", value_parser = parse_idle_timeout, env = "KUBE_PRESTOP_IDLE_TIMEOUT")]
    pub idle_timeout: Duration,
    /// The longest time a response may take to be sent: a connection whose
    /// response is not taken in whole within it after the handler produced
    /// it (an HTTP/2 client that never opens its flow-control window), or
    /// whose write to the socket makes no progress for it (a client that
    /// does not read), is dropped. Default 10 s; more than 0.
    #[arg(long, default_value = "10s", value_parser = parse_write_timeout, env = "KUBE_PRESTOP_WRITE_TIMEOUT")]
    pub write_timeout: Duration,
    /// Kubeconfig for the cluster caches (default: the KUBECONFIG
    /// environment variable, ~/.kube/config, then the in-cluster service
    /// account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Run without a cluster: LimitRanges are taken as empty.
    #[arg(long, env = "KUBE_PRESTOP_NO_CLUSTER")]
    pub no_cluster: bool,
    /// The static sidecar binaries (each at most 1 MiB): a file (its
    /// architecture read from its ELF header) or a directory of
    /// `<arch>/kube-prestop-sidecar` (the install image's `/architectures/`
    /// as `install --dest-dir` copies it); repeatable. With them (and a
    /// source that allows ConfigMaps), the webhook keeps each architecture's
    /// binary in an immutable ConfigMap (`kube-prestop-sidecar-<sha256
    /// prefix>`) in each namespace where it injects pods, and pods whose
    /// node architecture is known at admission mount it instead of getting
    /// the install init container (one kubelet pod sync less at pod start).
    /// Needs a cluster, and RBAC create/list/watch on ConfigMaps. Without
    /// them, no pod gets a ConfigMap.
    #[arg(long, env = "KUBE_PRESTOP_SIDECAR_BINARY", value_delimiter = ',')]
    pub sidecar_binary: Vec<PathBuf>,
    /// With `--sidecar-binary`: label selector of the namespaces whose pods
    /// the webhook configuration sends (its `namespaceSelector`), e.g.
    /// `kube-prestop.io/inject=enabled,kubernetes.io/metadata.name notin
    /// (kube-system,kube-prestop)`: the only namespaces where the webhook
    /// creates its ConfigMaps, as a metadata-only watch of Namespaces
    /// reports them (needs RBAC list/watch on Namespaces); never
    /// `kube-system` or `--webhook-namespace`. A review for a pod in any
    /// other namespace is answered as usual, without a write (counted in
    /// `kube_prestop_sidecar_configmap_refusals_total`). Required with
    /// `--sidecar-binary` when `--sidecar-binary-source` allows ConfigMaps
    /// (`auto`, `configMap`): the process refuses to start without it.
    #[arg(
        long,
        env = "KUBE_PRESTOP_NAMESPACE_SELECTOR",
        requires = "sidecar_binary"
    )]
    pub namespace_selector: Option<String>,
    /// With `--namespace-selector`: each selected namespace gets its
    /// ConfigMap as soon as it matches, so its first pod starts without the
    /// install init container too, for each architecture some node of the
    /// cluster has. Without it, a selected namespace gets its ConfigMap
    /// when its first pod is injected.
    #[arg(
        long,
        env = "KUBE_PRESTOP_CREATE_AHEAD",
        requires = "namespace_selector"
    )]
    pub create_ahead: bool,
}

/// Flags of `inject`.
#[derive(Debug, Args)]
pub struct InjectArgs {
    /// Engine configuration.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Manifest file (YAML, multi-document YAML or JSON); `-` reads stdin.
    #[arg(short = 'f', long = "filename")]
    pub filename: PathBuf,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormatFlag::Yaml)]
    pub output: OutputFormatFlag,
    /// Namespace of documents without `metadata.namespace` (a DNS-1123
    /// label, as every namespace name).
    #[arg(short = 'n', long, default_value = "default", value_parser = namespace_name)]
    pub namespace: String,
}

/// `-n`'s value parser: a namespace name (a DNS-1123 label), else an error
/// saying what is allowed.
fn namespace_name(value: &str) -> Result<String, String> {
    match kube_prestop_engine::config::namespace_problem("--namespace", value) {
        Some(why) => Err(why),
        None => Ok(value.to_owned()),
    }
}

/// Flags of `outcomes`.
#[derive(Debug, Args)]
pub struct OutcomesArgs {
    /// Plain-HTTP listen address for `/metrics`, `/livez`, `/readyz`.
    #[arg(
        long,
        default_value = "0.0.0.0:9464",
        env = "KUBE_PRESTOP_METRICS_ADDR"
    )]
    pub metrics_addr: SocketAddr,
    /// Kubeconfig (default: the KUBECONFIG environment variable,
    /// ~/.kube/config, then the in-cluster service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}
