//! `sluice run` and `sluice check`: loading, start-up banner, signals, reload and graceful
//! shutdown.

use crate::instance::{Instance, ReloadRecord};
use anyhow::Context as _;
use sluice_config::{CertCache, DefaultConfigParams, ListenerKind, Snapshot, load_file};
use sluice_control::{Controller, Source, Target, TargetFuture};
use sluice_proxy::Gateway;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// What the routes' `[route.auth]` and the MQTT listeners' `[listener.mqtt.auth]` files say:
/// each problem with its owner, file and line.
fn auth_problems(s: &Snapshot) -> Vec<String> {
    let mut problems = sluice_auth::check(&s.routes);
    problems.extend(sluice_auth::check_listeners(&s.listeners));
    problems
}

/// `sluice check --config FILE`: every error at once, exit status 1 when there is any.
pub(crate) fn check(path: &Path) -> ExitCode {
    match load_file(path) {
        Ok(s) if !auth_problems(&s).is_empty() => {
            for problem in auth_problems(&s) {
                eprintln!("{}: {problem}", path.display());
            }
            ExitCode::FAILURE
        }
        Ok(s) if sluice_lua::check(&s.lua, &s.routes).is_some() => {
            // Lua's own words: `file:line: message`, the file the code is in.
            if let Some(problem) = sluice_lua::check(&s.lua, &s.routes) {
                eprintln!("{problem}");
            }
            ExitCode::FAILURE
        }
        Ok(s) if sluice_waf::check(&s.waf, &s.routes).is_some() => {
            // libmodsecurity's words: the rule file and line.
            if let Some(problem) = sluice_waf::check(&s.waf, &s.routes) {
                eprintln!("{}: {problem}", path.display());
            }
            ExitCode::FAILURE
        }
        Ok(s) => {
            for warning in sluice_lua::warnings(&s.lua, &s.routes) {
                eprintln!("warning: {warning}");
            }
            // Written, not printed: `sluice check | head -1` closes the pipe early, which
            // is no failure of the check.
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "{}: OK ({} listener(s), {} certificate(s), {} upstream(s), {} route(s))",
                path.display(),
                s.listeners.len(),
                s.certificates.len(),
                s.upstreams.len(),
                s.routes.len()
            );
            let chain = sluice_tls::chain::Chain::of(&s);
            let _ = writeln!(
                out,
                "private-key engines on this machine: {} ({})",
                chain.names(),
                chain.why
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person at a terminal: a log file or journald gets plain text.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// What `sluice run` was asked to do.
#[derive(Debug)]
pub(crate) struct RunArgs {
    pub(crate) config: Option<PathBuf>,
    pub(crate) state_dir: Option<PathBuf>,
    pub(crate) pid_file: Option<PathBuf>,
}

/// The gateway as the control plane sees it: applying a snapshot also moves the admin
/// listener when its address changed.
struct Running {
    gateway: Arc<Gateway>,
    admin: Mutex<Option<AdminTask>>,
    control: OnceLock<Arc<Controller>>,
    started: Instant,
    /// The demo origin's listening socket (open until it stops accepting), for a binary upgrade.
    demo_fd: Option<std::os::fd::RawFd>,
    /// The ACME certificates' renewal tasks, following each applied configuration.
    acme: Mutex<sluice_acme::Manager>,
    /// The OCSP stapling tasks, likewise.
    ocsp: Mutex<sluice_tls::ocsp::Stapler>,
}

struct AdminTask {
    configured: SocketAddr,
    bound: SocketAddr,
    /// Its listening socket (owned by the task), for a binary upgrade.
    fd: std::os::fd::RawFd,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn sources(&self) -> sluice_admin::Sources {
        sluice_admin::Sources {
            gateway: self.gateway.clone(),
            control: self.control.get().cloned(),
            started: self.started,
        }
    }

    /// Starts, moves or stops the admin listener to match `snapshot`.
    async fn place_admin(
        &self,
        snapshot: &Snapshot,
        inherited: Option<std::net::TcpListener>,
    ) -> anyhow::Result<()> {
        let want = snapshot.admin.as_ref().map(|a| a.address);
        let current = self
            .admin
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|a| a.configured);
        if want == current {
            return Ok(());
        }
        let new = match want {
            Some(addr) => {
                let context =
                    || format!("binding the admin listener on {addr}; change or disable [admin]");
                let handed_over = inherited.filter(|s| {
                    s.local_addr()
                        .is_ok_and(|a| a == addr || (addr.port() == 0 && a.ip() == addr.ip()))
                });
                let socket = match handed_over {
                    Some(s) => {
                        s.set_nonblocking(true).with_context(context)?;
                        tokio::net::TcpListener::from_std(s).with_context(context)?
                    }
                    None => tokio::net::TcpListener::bind(addr)
                        .await
                        .with_context(context)?,
                };
                use std::os::fd::AsRawFd as _;
                let fd = socket.as_raw_fd();
                let (bound, task) =
                    sluice_admin::serve_on(socket, self.sources()).with_context(context)?;
                Some(AdminTask {
                    configured: addr,
                    bound,
                    fd,
                    task,
                })
            }
            None => None,
        };
        let old = std::mem::replace(
            &mut *self.admin.lock().unwrap_or_else(|e| e.into_inner()),
            new,
        );
        if let Some(old) = old {
            old.task.abort();
        }
        Ok(())
    }

    /// Every listening socket, the admin listener's included, for a binary upgrade.
    async fn listening_fds(&self) -> Vec<(String, std::os::fd::RawFd)> {
        let mut fds = self.gateway.listening_fds().await;
        if let Some(a) = self
            .admin
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            fds.push((crate::upgrade::ADMIN.to_owned(), a.fd));
        }
        if let Some(fd) = self.demo_fd {
            fds.push((crate::upgrade::DEMO.to_owned(), fd));
        }
        fds
    }

    fn admin_address(&self) -> Option<SocketAddr> {
        self.admin
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|a| a.bound)
    }
}

impl Target for Running {
    fn apply(&self, snapshot: Arc<Snapshot>) -> TargetFuture<'_> {
        Box::pin(async move {
            let report = self
                .gateway
                .apply(snapshot.clone())
                .await
                .map_err(|e| e.to_string())?;
            if let Err(e) = self.place_admin(&snapshot, None).await {
                tracing::error!(error = %format!("{e:#}"), "the admin listener stays where it was");
            }
            self.acme
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .update(&snapshot);
            sluice_tls::ocsp::kept::set_dir(Some(snapshot.acme.storage.join("ocsp")));
            self.ocsp
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .update(&snapshot);
            Ok(crate::instance::describe(&report))
        })
    }
}

/// The embedded default's certificates and admin token, made on first start. Returns whether
/// certificates were generated now.
pub(crate) fn prepare_state_dir(dir: &Path) -> anyhow::Result<bool> {
    let generated = sluice_tls::selfsigned::ensure_default_certificates(dir)
        .with_context(|| format!("preparing self-signed certificates in {}", dir.display()))?;
    crate::instance::ensure_admin_token(dir)?;
    Ok(generated)
}

/// `sluice default-config`: the embedded default as a file that runs as it is (its
/// certificates and token are made in the state directory if missing).
pub(crate) fn default_config_file(state_dir: Option<PathBuf>) -> anyhow::Result<()> {
    let dir = state_dir.unwrap_or_else(sluice_tls::selfsigned::default_state_dir);
    prepare_state_dir(&dir)?;
    print!(
        "{}",
        sluice_config::default_config_text(&DefaultConfigParams { state_dir: &dir })
    );
    Ok(())
}

/// `sluice run`.
pub(crate) fn run(args: RunArgs) -> anyhow::Result<()> {
    // Before any thread exists: it edits the environment.
    let inherited = crate::upgrade::Inherited::from_env()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    crate::liveness::watch(runtime.handle().clone())?;
    let served = runtime.block_on(serve(args, inherited));
    // Bounded: a worker thread held by a call that never returns (a Lua call stuck in a C
    // function) would otherwise keep the process from ending.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    served
}

/// Loads the configuration, starts everything it asks for, serves until a signal says to
/// stop (or a new binary took over), then drains and stops.
async fn serve(args: RunArgs, mut inherited: crate::upgrade::Inherited) -> anyhow::Result<()> {
    let dir = args
        .state_dir
        .clone()
        .unwrap_or_else(sluice_tls::selfsigned::default_state_dir);
    let certs = Arc::new(CertCache::new());
    let (source, embedded) = configuration_source(args.config.as_ref(), &dir)?;
    let fleet = match &source {
        Source::File(path) => crate::fleet::start(path).await?,
        Source::Text { .. } => None,
    };
    let snapshot = match &fleet {
        Some(f) => crate::fleet::initial(f)?,
        None => Controller::load(&source, &certs)?,
    };
    init_tracing(&snapshot.log.level);
    let demo = start_demo(&snapshot, &mut inherited).await?;
    let snapshot = Arc::new(snapshot);
    // Before the listeners' stores are built: they staple what the last process kept.
    sluice_tls::ocsp::kept::set_dir(Some(snapshot.acme.storage.join("ocsp")));
    let admin_socket = inherited.take(crate::upgrade::ADMIN);
    let running = start(&snapshot, &mut inherited, demo.as_ref(), fleet.as_deref()).await?;
    let control = Arc::new(Controller::new(source, running.clone(), certs, &snapshot));
    let _ = running.control.set(control.clone());
    if let Some(f) = &fleet {
        join_fleet(f, &control, &running.gateway);
    }
    running.place_admin(&snapshot, admin_socket).await?;
    if let (Some(f), Some(at)) = (&fleet, running.admin_address()) {
        // So that another gateway's admin API can ask this one (the fleet's request log).
        let tls = snapshot.admin.as_ref().is_some_and(|a| a.tls.is_some());
        let (name, url) = crate::fleet::member(at, tls);
        drop(f.announce(name, url));
    }

    let pid_file = args
        .pid_file
        .clone()
        .unwrap_or_else(|| dir.join("sluice.pid"));
    let instance = Instance::create(&pid_file, inherited.is_upgrade())?;
    // Every signal the banner names is handled before it is printed: a supervisor (or a
    // test) that sends one as soon as it reads the banner must not meet the default
    // action, which for SIGTERM, SIGINT, SIGHUP and SIGUSR2 ends the process at once.
    let signals = Signals::install()?;
    // Serving: an old process that started this one may stop accepting now.
    let after_upgrade = inherited.is_upgrade();
    inherited.ready();
    crate::service::ready(after_upgrade, &format!("serving {}", snapshot.source));
    banner(
        &snapshot,
        &running.gateway,
        demo.as_ref().map(|d| d.addr),
        embedded.map(|generated| (dir.as_path(), generated)),
        running.admin_address(),
        &pid_file,
    );
    let handed_over = until_stopped(signals, &control, &instance, &running, &pid_file).await;
    stop(&running, handed_over, demo, instance.as_deref()).await;
    Ok(())
}

/// Where the configuration comes from: `--config`, else the file an admin API edit of the
/// embedded default saved, else the embedded default itself (then also whether its
/// certificates were generated now).
fn configuration_source(
    config: Option<&PathBuf>,
    dir: &Path,
) -> anyhow::Result<(Source, Option<bool>)> {
    let autosave = dir.join("sluice.toml");
    if let Some(path) = config {
        return Ok((Source::File(path.clone()), None));
    }
    if autosave.exists() {
        eprintln!(
            "sluice: resuming from {}, saved by an admin API edit of the embedded default (delete it to start from the embedded default again)",
            autosave.display()
        );
        return Ok((Source::File(autosave), None));
    }
    let generated = prepare_state_dir(dir)?;
    let source = Source::Text {
        text: sluice_config::default_config_text(&DefaultConfigParams { state_dir: dir }),
        name: "<embedded default>".to_owned(),
        base_dir: dir.to_path_buf(),
        autosave: Some(autosave),
    };
    Ok((source, Some(generated)))
}

/// The demo origin of `[demo]`, on the socket a previous process handed over if any.
async fn start_demo(
    snapshot: &Snapshot,
    inherited: &mut crate::upgrade::Inherited,
) -> anyhow::Result<Option<crate::demo::Demo>> {
    let Some(addr) = snapshot.demo else {
        return Ok(None);
    };
    let demo = crate::demo::start(addr, inherited.take(crate::upgrade::DEMO))
        .await
        .with_context(|| format!("starting the demo origin on {addr}; change or remove [demo]"))?;
    Ok(Some(demo))
}

/// The gateway on its listeners (those handed over taken first) with its access log, and
/// the certificate tasks that follow its configuration.
async fn start(
    snapshot: &Arc<Snapshot>,
    inherited: &mut crate::upgrade::Inherited,
    demo: Option<&crate::demo::Demo>,
    fleet: Option<&sluice_fleet::Fleet>,
) -> anyhow::Result<Arc<Running>> {
    let access_log = sluice_proxy::AccessLog::open(&snapshot.log)
        .with_context(|| format!("opening the access log {:?}", snapshot.log.access_log))?;
    let gateway = Gateway::start_inherited(
        snapshot.clone(),
        access_log,
        std::mem::take(&mut inherited.sockets),
    )
    .await?;
    Ok(Arc::new(Running {
        gateway: Arc::new(gateway),
        admin: Mutex::new(None),
        control: OnceLock::new(),
        started: Instant::now(),
        demo_fd: demo.map(crate::demo::Demo::fd),
        acme: Mutex::new(acme_manager(snapshot, fleet).await),
        ocsp: Mutex::new(sluice_tls::ocsp::Stapler::start(snapshot)),
    }))
}

/// Fleet mode: objects shared through etcd, cache purges followed from it, and the
/// configuration kept in sync with it.
fn join_fleet(f: &Arc<sluice_fleet::Fleet>, control: &Arc<Controller>, gateway: &Arc<Gateway>) {
    control.set_shared(f.clone());
    // Until the purges etcd keeps are applied, nothing the disk tier holds from
    // before this start is served; after, only what is older than etcd keeps purges
    // (those cannot be known) stays distrusted (sluice_fleet::purge).
    let started = std::time::SystemTime::now();
    gateway.cache().distrust_before(started);
    let (purged, synced) = (gateway.clone(), gateway.clone());
    // Detached: it follows etcd for as long as the process runs.
    drop(f.follow_purges(
        Arc::new(move |host, path, prefix, at| {
            purged.cache().purge(host, path, prefix, at);
        }),
        Arc::new(move || {
            synced
                .cache()
                .trust_from(started - sluice_fleet::purge::KEEP);
        }),
    ));
    f.spawn(
        Arc::downgrade(control),
        Arc::new(sluice_tls::reread_ticket_key_files),
    );
}

/// Reloads on SIGHUP and upgrades on SIGUSR2 until SIGTERM or SIGINT, or until a new
/// binary serves. Returns whether one does (the sockets were handed over).
async fn until_stopped(
    signals: Signals,
    control: &Arc<Controller>,
    instance: &Option<Arc<Instance>>,
    running: &Arc<Running>,
    pid_file: &Path,
) -> bool {
    let Signals {
        hup,
        usr2,
        mut term,
        mut int,
    } = signals;
    let reloads = tokio::spawn(reload_on_hangup(hup, control.clone(), instance.clone()));
    let (upgraded_tx, mut upgraded) = tokio::sync::watch::channel(false);
    let upgrades = tokio::spawn(upgrade_on_usr2(
        usr2,
        running.clone(),
        pid_file.to_path_buf(),
        upgraded_tx,
    ));
    let handed_over = tokio::select! {
        _ = term.recv() => false,
        _ = int.recv() => false,
        _ = upgraded.wait_for(|done| *done) => {
            eprintln!("sluice: the new binary serves; this process stops accepting");
            true
        }
    };
    reloads.abort();
    upgrades.abort();
    handed_over
}

/// Stops the certificate tasks, drains the gateway, then closes the admin listener and the
/// demo origin and removes the pid file.
async fn stop(
    running: &Running,
    handed_over: bool,
    demo: Option<crate::demo::Demo>,
    instance: Option<&Instance>,
) {
    // Orders stop here: after an upgrade the new process renews (from the same storage).
    running
        .acme
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .stop();
    running
        .ocsp
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .stop();
    let shutdown_timeout = drain(&running.gateway, handed_over, demo.as_ref()).await;
    if let Some(admin) = running
        .admin
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    {
        admin.task.abort();
    }
    if let Some(demo) = demo {
        demo.stop(shutdown_timeout).await;
    }
    if let Some(instance) = instance {
        instance.remove();
    }
    eprintln!("sluice: stopped");
}

/// Stops accepting and drains the gateway: requests get `shutdown_timeout`; after an upgrade
/// (`handed_over`), long-lived relays (TCP, MQTT, WebSocket) stay with this process until
/// they end or `stream_drain_timeout` passes, as the new process takes only new ones.
/// Returns `shutdown_timeout`.
async fn drain(
    gateway: &Gateway,
    handed_over: bool,
    demo: Option<&crate::demo::Demo>,
) -> std::time::Duration {
    let global = gateway.snapshot().global.clone();
    let shutdown_timeout = global.shutdown_timeout;
    eprintln!(
        "sluice: shutting down; in-flight requests have {}s to finish",
        shutdown_timeout.as_secs_f32()
    );
    let streams = if handed_over {
        eprintln!(
            "sluice: open TCP, MQTT and WebSocket connections stay with this process for up to {}s",
            global.stream_drain_timeout.as_secs_f32()
        );
        global.stream_drain_timeout
    } else {
        shutdown_timeout
    };
    // Not after an upgrade: the service goes on in the new process (which is the main one
    // now), and systemd hears every process of the unit.
    if !handed_over {
        crate::service::stopping("draining");
    }
    // After an upgrade the new process's demo origin takes every new connection at once;
    // this one's connections close only after the gateway has drained (see `Demo`).
    if let Some(d) = demo.filter(|_| handed_over) {
        d.stop_accepting();
    }
    if !gateway
        .shutdown_keeping_streams(shutdown_timeout, streams)
        .await
    {
        eprintln!("sluice: some requests did not finish in time and were closed");
    }
    shutdown_timeout
}

/// The ACME manager: alone, or, in fleet mode, taking turns through etcd and following what
/// the other gateways' orders publish. A fleet whose etcd cannot be reached now orders alone
/// (logged): a certificate must not expire because etcd was down at start.
async fn acme_manager(
    snapshot: &Snapshot,
    fleet: Option<&sluice_fleet::Fleet>,
) -> sluice_acme::Manager {
    let Some(fleet) = fleet else {
        return sluice_acme::Manager::start(snapshot, None);
    };
    let coordinator = match fleet.acme_coordinator().await {
        Ok(c) => Some(Arc::new(c) as Arc<dyn sluice_acme::Coordinator>),
        Err(e) => {
            tracing::warn!(error = %e, "fleet mode: etcd unreachable; ACME certificates are ordered by this gateway alone");
            None
        }
    };
    let mut manager = sluice_acme::Manager::start(snapshot, coordinator);
    match fleet.follow_acme(manager.orders()).await {
        Ok(task) => manager.keep(task),
        Err(e) => {
            tracing::warn!(error = %e, "fleet mode: not following other gateways' ACME orders")
        }
    }
    manager
}

/// SIGUSR2: start the binary again with the listening sockets; once it serves, tell the main
/// task to drain and exit. A failed attempt leaves this process serving.
async fn upgrade_on_usr2(
    mut usr2: tokio::signal::unix::Signal,
    running: Arc<Running>,
    pid_file: PathBuf,
    done: tokio::sync::watch::Sender<bool>,
) -> anyhow::Result<()> {
    while usr2.recv().await.is_some() {
        tracing::info!("upgrade requested: starting the new binary with the listening sockets");
        let outcome = crate::upgrade::hand_over(running.listening_fds().await).await;
        crate::upgrade::record(&pid_file, &outcome);
        match outcome {
            Ok(pid) => {
                tracing::info!(new_pid = pid, "upgrade: the new binary is ready");
                let _ = done.send(true);
                return Ok(());
            }
            Err(e) => tracing::error!(error = %format!("{e:#}"), "upgrade failed"),
        }
    }
    Ok(())
}

/// SIGHUP: reload, and leave the outcome where `sluice reload` looks for it.
async fn reload_on_hangup(
    mut hup: tokio::signal::unix::Signal,
    control: Arc<Controller>,
    instance: Option<Arc<Instance>>,
) -> anyhow::Result<()> {
    while hup.recv().await.is_some() {
        crate::service::reloading();
        let result = control.reload().await;
        crate::service::reloaded(match &result {
            Ok(_) => "reloaded",
            Err(_) => "reload refused; the previous configuration serves",
        });
        if let Some(instance) = &instance {
            instance.record(&ReloadRecord::of(&result));
        }
    }
    Ok(())
}

/// What `sluice run` prints once it serves: each listener, the admin listener, the demo
/// origin, the embedded default's certificates, and how to reload, upgrade and stop.
fn banner(
    snapshot: &Snapshot,
    gateway: &Gateway,
    demo: Option<SocketAddr>,
    embedded: Option<(&Path, bool)>,
    admin: Option<SocketAddr>,
    pid_file: &Path,
) {
    let mut out = String::new();
    match embedded {
        Some(_) => out.push_str(&format!(
            "Sluice {} is running on its embedded default configuration.\n",
            env!("CARGO_PKG_VERSION")
        )),
        None => out.push_str(&format!(
            "Sluice {} is running with {}.\n",
            env!("CARGO_PKG_VERSION"),
            snapshot.source
        )),
    }
    for (l, (name, addr)) in snapshot.listeners.iter().zip(gateway.addresses()) {
        let (scheme, protos) = speaks(snapshot, l);
        let h3 = if l.http3 {
            format!("; HTTP/3 on UDP {}", addr.port())
        } else {
            String::new()
        };
        out.push_str(&format!("  {name:<8} {scheme}://{addr}/  ({protos}{h3})\n"));
    }
    if let Some(a) = admin {
        admin_lines(&mut out, snapshot, a, embedded.map(|(dir, _)| dir));
    }
    if let Some(origin) = demo {
        out.push_str(&format!(
            "  demo origin on {origin}: / (HTML page), /api/status (JSON), /headers (echo), /stream (a line every 100 ms)\n"
        ));
    }
    if let Some((dir, generated)) = embedded {
        out.push_str(&format!(
            "  self-signed RSA-2048 and ECDSA P-256 certificates for localhost in {} ({})\n",
            dir.display(),
            if generated {
                "generated now"
            } else {
                "kept from an earlier run"
            }
        ));
        out.push_str("  try: curl -k https://127.0.0.1:8443/\n");
    }
    out.push_str(&format!(
        "Reload with: kill -HUP {pid} (or {sluice} reload --pid-file {0}); upgrade the binary with: {sluice} upgrade --pid-file {0}\nStop with Ctrl-C, or: kill -TERM {pid}\n",
        pid_file.display(),
        pid = std::process::id(),
        sluice = self_command(),
    ));
    // Not print!: a closed stdout (a supervisor that stopped reading) must not panic.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), out.as_bytes());
}

/// A listener's URL scheme and what it speaks, as the banner shows them.
fn speaks(snapshot: &Snapshot, l: &sluice_config::Listener) -> (&'static str, String) {
    let (scheme, protos) = match (&l.kind, &l.tls, l.h2, l.http1) {
        (ListenerKind::Tcp(tcp), tls, _, _) => {
            let relayed = match (tcp.passthrough.is_empty(), tcp.upstream) {
                (false, _) => "TLS passed through by server name".to_owned(),
                (true, Some(u)) => {
                    format!("relayed to upstream {}", snapshot.upstreams[u].name)
                }
                (true, None) => "relayed".to_owned(),
            };
            return (if tls.is_some() { "tls" } else { "tcp" }, relayed);
        }
        (ListenerKind::Mqtt(mqtt), tls, _, _) => {
            let relayed = format!(
                "MQTT to the brokers of upstream {}",
                snapshot.upstreams[mqtt.upstream].name
            );
            return (if tls.is_some() { "mqtts" } else { "mqtt" }, relayed);
        }
        (_, Some(_), true, true) => ("https", "HTTP/2 and HTTP/1.1 by ALPN"),
        (_, Some(_), true, false) => ("https", "HTTP/2"),
        (_, Some(_), _, _) => ("https", "HTTP/1.1"),
        (_, None, true, true) => ("http", "HTTP/1.1, and HTTP/2 with prior knowledge"),
        (_, None, true, false) => ("http", "HTTP/2 with prior knowledge"),
        (_, None, _, _) => ("http", "HTTP/1.1"),
    };
    (scheme, protos.to_owned())
}

/// The admin listener's lines: where it is, and where its API's token is when it has one
/// (`embedded`: the embedded default's state directory).
fn admin_lines(out: &mut String, snapshot: &Snapshot, a: SocketAddr, embedded: Option<&Path>) {
    let scheme = if snapshot.admin.as_ref().is_some_and(|a| a.tls.is_some()) {
        "https"
    } else {
        "http"
    };
    out.push_str(&format!(
        "  admin    {scheme}://{a}/ (dashboard), /metrics (Prometheus) and /status (JSON)\n"
    ));
    if snapshot.admin.as_ref().is_some_and(|a| a.token.is_some()) {
        out.push_str(&format!(
            "           admin API ({scheme}://{a}/api/v1/config, /api/v1/routes/NAME, POST /api/v1/reload): writes take the bearer token in {}\n",
            embedded.map_or_else(
                || "[admin] token_file".to_owned(),
                |dir| dir.join("admin.token").display().to_string()
            )
        ));
    }
}

/// How a shell reaches this binary: `sluice` where the PATH finds this very file, else its
/// full path (`scripts/run` runs target/quick/sluice, which no PATH names), so that the
/// commands the banner prints work when pasted.
fn self_command() -> String {
    let Ok(exe) = std::env::current_exe() else {
        return "sluice".to_owned();
    };
    let me = std::fs::canonicalize(&exe).ok();
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .any(|dir| std::fs::canonicalize(dir.join("sluice")).ok() == me && me.is_some())
    });
    let path = exe.display().to_string();
    if on_path {
        "sluice".to_owned()
    } else if path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-+".contains(&b))
    {
        path
    } else {
        format!("'{}'", path.replace('\'', "'\\''"))
    }
}

/// The signals `sluice run` handles, installed together before the banner names them.
struct Signals {
    hup: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            hup: signal(SignalKind::hangup()).context("installing the SIGHUP handler")?,
            usr2: signal(SignalKind::user_defined2()).context("installing the SIGUSR2 handler")?,
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }
}
