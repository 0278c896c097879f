//! `kube-prestop-webhook`: the admission server (`serve`), offline
//! injection (`inject`), the installation check (`check`) and the optional
//! hook-outcome exporter (`outcomes`).

use std::io::{Read, Write};
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use kube_prestop_cluster::cluster_cache::ClusterCache;
use kube_prestop_cluster::image_volume_probe::ImageVolumeProbe;
use kube_prestop_cluster::node_facts::NodeWatch;
use kube_prestop_cluster::sidecar_configmap::{SidecarConfigMaps, WriteScope, load_binaries};
use kube_prestop_cluster::{client, self_managed_certs};
use kube_prestop_metrics::Metrics;
use kube_prestop_server::{ConnLimits, Server, ServerConfig};
use kube_prestop_tools::{check, inject};
use kube_prestop_webhook::cli::{Cli, Command, InjectArgs, OutcomesArgs, ServeArgs};
use kube_prestop_webhook::logging;

/// mimalloc instead of the C library's malloc. The shipped image is a static
/// musl binary, and musl's malloc (mallocng) takes a global lock on every
/// call; glibc's arenas contend between tokio's worker threads too. Each
/// review allocates a few hundred times (the parsed Pod, the patch, the
/// answer, hyper's and rustls' buffers), so the allocator is a large part of
/// the per-request CPU (issue #7: see the bench in README.md). Freed memory
/// goes back to the system at once ([`kube_prestop_webhook::allocator`]).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    kube_prestop_webhook::allocator::purge_freed_memory_at_once();
    let cli = Cli::parse();
    if let Err(e) = logging::init(cli.log.log_format.into(), &cli.log.log_level) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    // Panics (bugs) go through the log subscriber, so JSON logs stay JSON.
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(panic = %info, "internal error (panic)");
    }));
    let result = match cli.command {
        Command::Serve(args) => serve(*args),
        Command::Inject(args) => inject(*args),
        Command::Outcomes(args) => outcomes(*args),
        Command::Check(args) => {
            return match check::run_to_stdout(&args.options(), args.kubeconfig.as_deref()) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            };
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Reads all of `input` as UTF-8 text, at most `limit` bytes: at most
/// `limit + 1` are read, so an endless input (`-f /dev/zero`, a pipe that
/// never ends) is refused at once instead of filling memory. `what` names
/// the input in the error.
///
/// Errors: the read's, text that is not UTF-8, or more than `limit` bytes.
fn read_bounded(input: impl Read, what: &str, limit: usize) -> anyhow::Result<String> {
    let mut bytes = Vec::new();
    input
        .take(u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {what}"))?;
    if bytes.len() > limit {
        anyhow::bail!(
            "{what} is over {limit} bytes, the largest request body the server accepts (--max-body-bytes' default); not read further"
        );
    }
    String::from_utf8(bytes).with_context(|| format!("cannot read {what}: not UTF-8"))
}

/// `inject`: the manifest (a file or stdin, at most
/// [`DEFAULT_MAX_BODY_BYTES`](kube_prestop_server::DEFAULT_MAX_BODY_BYTES),
/// the bound the server puts on a review) through the engine, to stdout.
fn inject(args: InjectArgs) -> anyhow::Result<()> {
    let limit = kube_prestop_server::DEFAULT_MAX_BODY_BYTES;
    let input = if args.filename.as_os_str() == "-" {
        read_bounded(std::io::stdin().lock(), "stdin", limit)?
    } else {
        let what = args.filename.display().to_string();
        let file =
            std::fs::File::open(&args.filename).with_context(|| format!("cannot read {what}"))?;
        read_bounded(file, &what, limit)?
    };
    let config = args
        .engine
        .engine_config()
        .context("invalid engine flags")?;
    let out = inject::run(&input, &args.namespace, &config, args.output.into())?;
    for line in &out.summaries {
        tracing::info!("{line}");
    }
    for line in &out.warnings {
        tracing::warn!("{line}");
    }
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.text.as_bytes())
        .and_then(|()| stdout.flush())
        .context("cannot write stdout")?;
    Ok(())
}

fn outcomes(args: OutcomesArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    runtime.block_on(async {
        let client = client::client(args.kubeconfig.as_deref())
            .await
            .context("cannot set up the cluster client")?;
        let config = kube_prestop_outcomes::OutcomesConfig {
            metrics_addr: args.metrics_addr,
        };
        kube_prestop_outcomes::run(
            client,
            config,
            // Machine-readable for scripts that start with port 0.
            |addr| println!("listening metrics={addr}"),
            |listener, router| {
                kube_prestop_server::serve_metrics(
                    listener,
                    router,
                    kube_prestop_server::default_conn_limits(),
                    shutdown_signal(),
                )
            },
        )
        .await
        .context("outcome exporter")
    })
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    runtime.block_on(serve_async(args))
}

fn server_config(args: &ServeArgs) -> anyhow::Result<ServerConfig> {
    let mut config = ServerConfig::new(
        args.listen_addr,
        args.metrics_addr,
        args.tls_cert_file.clone(),
        args.tls_key_file.clone(),
    );
    config.cert_reload_interval = args.cert_reload_interval;
    config.client_ca_file = args.client_ca_file.clone();
    config.drain_delay = args.drain_delay;
    config.shutdown_grace = args.shutdown_grace;
    config.failure_mode = args.failure_mode.into();
    config.engine = args
        .engine
        .engine_config()
        .context("invalid engine flags")?;
    config.max_body_bytes = args.max_body_bytes;
    config.max_inflight_body_bytes = args.max_inflight_body_bytes;
    config.max_inflight_parsed_bytes = args.max_inflight_parsed_bytes;
    config.body_read_timeout = args.read_timeout;
    config.conn_limits = ConnLimits {
        max_connections: args.max_connections,
        handshake_timeout: args.read_timeout,
        header_read_timeout: args.read_timeout,
        idle_timeout: args.idle_timeout,
        write_timeout: args.write_timeout,
        ..config.conn_limits
    };
    Ok(config)
}

async fn serve_async(args: ServeArgs) -> anyhow::Result<()> {
    let config = server_config(&args)?;
    let source = config.engine.sidecar_binary_source;
    // Where ConfigMaps may be created is never decided by a request alone
    // (anyone reaching the HTTPS port can post a review): without the
    // selector there is nowhere the webhook may write, which is a
    // configuration error rather than a silent loss of the ConfigMaps.
    if source.may_use_config_map()
        && !args.sidecar_binary.is_empty()
        && args.namespace_selector.is_none()
    {
        anyhow::bail!(
            "--sidecar-binary with --sidecar-binary-source {source} needs --namespace-selector (the webhook configuration's namespaceSelector as a label selector, e.g. 'kube-prestop.io/inject=enabled,kubernetes.io/metadata.name notin (kube-system,{})'): ConfigMaps are created only in the namespaces it selects",
            config.engine.webhook_namespace
        );
    }
    let client = client::optional_client(args.kubeconfig.as_deref(), args.no_cluster)
        .await
        .context("cannot set up the cluster client")?;
    if let Some(cert_config) = args.certs.config(&config.engine.webhook_namespace) {
        let client = client
            .clone()
            .context("--self-managed-certs needs a cluster (kubeconfig or in-cluster)")?;
        start_self_managed_certs(client, cert_config).await?;
    }
    let metrics = Metrics::new();
    let binaries = load_binaries(&args.sidecar_binary).context("--sidecar-binary")?;
    let engine = &config.engine;
    let cache = match client {
        Some(client) => {
            let mut cache = ClusterCache::start(client.clone());
            // The node facts decide the architecture (ConfigMaps) and the
            // runtimes (image volumes): not needed for installContainer.
            let nodes = if source.may_use_config_map() || source.may_use_image_volume() {
                NodeWatch::start(client.clone())
            } else {
                NodeWatch::disabled("source installContainer: the nodes are not watched")
            };
            cache = cache.with_nodes(nodes.clone());
            if source.may_use_image_volume() {
                cache = cache.with_image_volume_probe(ImageVolumeProbe::start(
                    client.clone(),
                    &engine.webhook_namespace,
                    &engine.install_image,
                    &engine.install_image_pull_policy,
                ));
            }
            if source.may_use_config_map() && !binaries.is_empty() {
                // Checked at the start: ConfigMaps need the selector.
                let selector = args.namespace_selector.as_deref().unwrap_or_default();
                let scope = WriteScope::start(
                    client.clone(),
                    selector,
                    [engine.webhook_namespace.clone()],
                    metrics.clone(),
                );
                tracing::info!(
                    selector,
                    excluded = %format!("kube-system,{}", engine.webhook_namespace),
                    create_ahead = args.create_ahead,
                    "sidecar-binary ConfigMaps only in the namespaces the selector selects"
                );
                for binary in binaries {
                    tracing::info!(
                        name = binary.name(),
                        architecture = binary.architecture(),
                        bytes = binary.size(),
                        sha256 = binary.sha256(),
                        "sidecar binary for ConfigMaps"
                    );
                    let config_maps = SidecarConfigMaps::start(
                        client.clone(),
                        binary,
                        metrics.clone(),
                        scope.clone(),
                    );
                    if args.create_ahead {
                        config_maps.provision(nodes.clone());
                    }
                    cache = cache.with_sidecar_config_maps(config_maps);
                }
            } else if !binaries.is_empty() {
                tracing::warn!(%source, "--sidecar-binary ignored: the source uses no ConfigMaps");
            }
            cache
        }
        None if !binaries.is_empty() => {
            anyhow::bail!("--sidecar-binary needs a cluster (kubeconfig or in-cluster)")
        }
        None => ClusterCache::disconnected(),
    };
    tracing::info!(%source, architectures = %engine.shipped_architectures.join(","), "sidecar binary delivery");
    let kinds: Vec<&str> = engine.workload_kinds.iter().map(|k| k.as_str()).collect();
    tracing::info!(workload_kinds = %kinds.join(","), "pods of these workload kinds are injected without the opt-in annotation");
    let server = Server::bind_with_metrics(config, cache, metrics).await?;
    // Machine-readable for scripts that start with port 0.
    println!(
        "listening https={} metrics={}",
        server.https_addr(),
        server.metrics_addr()
    );
    server.run(shutdown_signal()).await;
    Ok(())
}

/// Starts the self-managed certificate controller in the background and
/// waits until its first pass has written the serving certificate, so the
/// server can load it. Errors of a pass are retried by the controller (with
/// backoff, logged), so this waits as long as the API server is unreachable;
/// the kubelet's probes bound that.
async fn start_self_managed_certs(
    client: kube::Client,
    config: self_managed_certs::SelfManagedCertsConfig,
) -> anyhow::Result<()> {
    let (status_tx, mut status_rx) = tokio::sync::watch::channel(None);
    tracing::info!(
        secret = %config.secret_name,
        namespace = %config.namespace,
        cert_dir = %config.cert_dir.display(),
        "self-managed certificates: waiting for the first certificate"
    );
    let controller = tokio::spawn(self_managed_certs::run_with_status(
        client,
        config,
        status_tx,
        std::future::pending::<()>(),
    ));
    tokio::select! {
        ready = status_rx.wait_for(Option::is_some) => {
            ready.context("certificate controller stopped")?;
            Ok(())
        }
        ended = controller => match ended {
            Ok(Ok(())) => anyhow::bail!("certificate controller stopped"),
            Ok(Err(e)) => Err(e).context("certificate controller failed"),
            Err(e) => Err(e).context("certificate controller crashed"),
        },
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received"),
        () = term => tracing::info!("SIGTERM received"),
    }
}
